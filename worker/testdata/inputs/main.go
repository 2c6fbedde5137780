// Command inputs reads a task's input directory every way a program may
// and prints what it saw, so that web/wasi.js's /input can be compared
// with the native worker's read-only mount byte for byte (and work count
// for work count): the directory's listing, each file's size and bytes
// (read whole, at offsets and after seeks), the directory "chunks", and
// the errors of paths that are not there and of writes.
package main

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

func main() {
	ents, err := os.ReadDir("/input")
	fmt.Println("readdir:", err)
	for _, e := range ents {
		fmt.Println(" ", e.Name(), e.IsDir(), e.Type())
		if e.IsDir() {
			sub, err := os.ReadDir("/input/" + e.Name())
			fmt.Println("  sub:", len(sub), err)
			continue
		}
		b, err := os.ReadFile("/input/" + e.Name())
		fmt.Printf("  read %d bytes %x %v\n", len(b), sha256.Sum256(b), err)
		f, err := os.Open("/input/" + e.Name())
		if err != nil {
			fmt.Println("  open:", err)
			continue
		}
		st, err := f.Stat()
		fmt.Println("  stat:", st.Size(), st.Mode().IsRegular(), err)
		p := make([]byte, 7)
		n, err := f.ReadAt(p, 3)
		fmt.Printf("  readat 3: %d %q %v\n", n, p[:n], err)
		off, err := f.Seek(-5, io.SeekEnd)
		fmt.Println("  seek end-5:", off, err)
		rest, err := io.ReadAll(f)
		fmt.Printf("  rest: %q %v\n", rest, err)
		_, err = f.Seek(-1, io.SeekStart)
		fmt.Println("  seek -1:", err)
		_, err = f.Write([]byte("x"))
		fmt.Println("  write:", err != nil)
		fmt.Println("  close:", f.Close())
	}
	for _, p := range []string{"/input/nothing", "/input/chunks/nothing", "/input/../etc"} {
		_, err := os.Stat(p)
		fmt.Println("stat", p, errors.Is(err, os.ErrNotExist), errno(err))
	}
	_, err = os.Create("/input/new")
	fmt.Println("create:", errno(err))
	_, err = os.OpenFile("/input/data.csv", os.O_WRONLY, 0)
	fmt.Println("open for writing:", errno(err))
	fmt.Println("mkdir:", errno(os.Mkdir("/input/d", 0o755)))
	fmt.Println("remove:", errno(os.Remove("/input/data.csv")))
}

// errno names the system error in err, or says there is none.
func errno(err error) string {
	var e syscall.Errno
	if errors.As(err, &e) {
		return fmt.Sprintf("errno %d", uintptr(e))
	}
	if err != nil {
		return "error " + err.Error()
	}
	return "ok"
}
