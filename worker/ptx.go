package worker

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// PTX kernel signatures. The driver's cuLaunchKernel reads each parameter
// of a kernel from the pointer the launch passes for it, as many bytes as
// the kernel declares; it cannot tell how many pointers the caller passed.
// A launch with fewer parameters than the kernel takes, or a parameter
// wider than the 8-byte slot the worker passes, would make the driver read
// past the worker's array: a crash of the worker, or its memory copied
// into the kernel. So the worker reads each kernel's parameter list from
// the PTX text itself (PTX ISA, "Kernel Function Parameters": .entry
// name ( .param .type [.ptr .space .align N] name[, ...] ) or
// .param .align N .b8 name[size] for an aggregate) and refuses a launch
// that does not match it.

// ptxParamKinds maps a PTX fundamental type to its width in bytes.
var ptxParamKinds = map[string]int{
	".b8": 1, ".s8": 1, ".u8": 1,
	".b16": 2, ".s16": 2, ".u16": 2, ".f16": 2, ".bf16": 2,
	".b32": 4, ".s32": 4, ".u32": 4, ".f32": 4, ".f16x2": 4, ".bf16x2": 4,
	".b64": 8, ".s64": 8, ".u64": 8, ".f64": 8,
}

// ptxKernel is one .entry of a PTX module: its parameters' widths in
// bytes, in order.
type ptxKernel struct {
	params []int
}

// maxPTXKernels bounds the kernels one module may declare.
const maxPTXKernels = 4096

// ptxKernels returns the kernels (.entry directives) that PTX text src
// declares, by name. It fails on text that is not PTX (binary cubin or
// fatbin images: they carry NUL bytes, or are not UTF-8) and on an .entry
// whose parameter list it cannot read; the error names the kernel.
func ptxKernels(src []byte) (map[string]ptxKernel, error) {
	if bytes.IndexByte(src, 0) >= 0 || !utf8.Valid(src) {
		return nil, fmt.Errorf("not PTX text (a NUL byte or invalid UTF-8: binary cubin and fatbin images are not accepted, only the PTX a job names)")
	}
	s, err := stripPTXComments(string(src))
	if err != nil {
		return nil, err
	}
	kernels := map[string]ptxKernel{}
	for {
		i := indexDirective(s, ".entry")
		if i < 0 {
			return kernels, nil
		}
		s = s[i+len(".entry"):]
		name, rest := ptxIdent(strings.TrimLeft(s, " \t\r\n"))
		if name == "" {
			return nil, fmt.Errorf(".entry without a kernel name")
		}
		rest = strings.TrimLeft(rest, " \t\r\n")
		var k ptxKernel
		if strings.HasPrefix(rest, "(") {
			end := strings.IndexByte(rest, ')')
			if end < 0 {
				return nil, fmt.Errorf("kernel %s: parameter list without ')'", name)
			}
			list := strings.TrimSpace(rest[1:end])
			rest = rest[end+1:]
			if list != "" {
				for n, decl := range strings.Split(list, ",") {
					w, err := ptxParamWidth(decl)
					if err != nil {
						return nil, fmt.Errorf("kernel %s, parameter %d: %w", name, n, err)
					}
					k.params = append(k.params, w)
				}
			}
		}
		if _, dup := kernels[name]; dup {
			return nil, fmt.Errorf("kernel %s is declared twice", name)
		}
		if len(kernels) == maxPTXKernels {
			return nil, fmt.Errorf("more than %d kernels in one module", maxPTXKernels)
		}
		kernels[name] = k
		s = rest
	}
}

// indexDirective returns the index of directive d in s where it stands as
// a whole token (not, e.g., inside ".entryfoo" or a longer name), or -1.
func indexDirective(s, d string) int {
	off := 0
	for {
		i := strings.Index(s[off:], d)
		if i < 0 {
			return -1
		}
		i += off
		before := i == 0 || !isPTXIdentByte(s[i-1])
		after := i+len(d) == len(s) || !isPTXIdentByte(s[i+len(d)])
		if before && after {
			return i
		}
		off = i + len(d)
	}
}

// ptxParamAttrs are the tokens a .param declaration may hold besides its
// type, its name and .align's number (PTX ISA, "Kernel Function
// Parameter Attributes": .ptr, a state space, .align N). Any other token
// (a vector type such as .v4, an opaque type) is refused rather than
// guessed at.
var ptxParamAttrs = map[string]bool{".ptr": true, ".global": true, ".const": true, ".local": true, ".shared": true, ".align": true}

// ptxParamWidth returns the width in bytes of one .param declaration:
// .param [attributes] .type name or .param [attributes] .type name[N].
func ptxParamWidth(decl string) (int, error) {
	d := strings.TrimSpace(decl)
	// An array's size may be written with spaces: name[ 16 ].
	size := 1
	if open := strings.IndexByte(d, '['); open >= 0 {
		end := strings.IndexByte(d, ']')
		if end < open || strings.TrimSpace(d[end+1:]) != "" {
			return 0, fmt.Errorf("%q: bad array size (one dimension, 1 to 65536)", d)
		}
		n, err := strconv.Atoi(strings.TrimSpace(d[open+1 : end]))
		if err != nil || n < 1 || n > 1<<16 {
			return 0, fmt.Errorf("%q: bad array size (one dimension, 1 to 65536)", d)
		}
		size, d = n, strings.TrimSpace(d[:open])
	}
	f := strings.Fields(d)
	if len(f) < 3 || f[0] != ".param" {
		return 0, fmt.Errorf("%q is not a .param declaration", d)
	}
	width := 0
	for i := 1; i < len(f)-1; i++ {
		tok := f[i]
		if w, ok := ptxParamKinds[tok]; ok {
			if width != 0 {
				return 0, fmt.Errorf("%q names two types", d)
			}
			width = w
			continue
		}
		switch {
		case tok == ".texref" || tok == ".samplerref" || tok == ".surfref":
			return 0, fmt.Errorf("%s parameters are not supported", tok)
		case !ptxParamAttrs[tok]:
			return 0, fmt.Errorf("%q: %s is not a type or attribute idlepool_cuda knows", d, tok)
		case tok == ".align":
			if i+1 >= len(f)-1 {
				return 0, fmt.Errorf("%q: .align without a number", d)
			}
			if _, err := strconv.Atoi(f[i+1]); err != nil {
				return 0, fmt.Errorf("%q: .align without a number", d)
			}
			i++
		}
	}
	if width == 0 {
		return 0, fmt.Errorf("%q has no type idlepool_cuda knows", d)
	}
	if name, _ := ptxIdent(f[len(f)-1]); name != f[len(f)-1] {
		return 0, fmt.Errorf("%q: %q is not a parameter name", d, f[len(f)-1])
	}
	return width * size, nil
}

// ptxIdent splits a PTX identifier ([a-zA-Z_$%][a-zA-Z0-9_$]*) off the
// front of s.
func ptxIdent(s string) (name, rest string) {
	if s == "" || !(s[0] == '%' || (isPTXIdentByte(s[0]) && (s[0] < '0' || s[0] > '9'))) {
		return "", s
	}
	i := 1
	for i < len(s) && isPTXIdentByte(s[i]) {
		i++
	}
	return s[:i], s[i:]
}

func isPTXIdentByte(c byte) bool {
	return c == '_' || c == '$' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
}

// stripPTXComments replaces // and /* */ comments with spaces (PTX uses
// C++ comment syntax) and empties string literals ("...", with backslash
// escapes, as in .file and .pragma), so that an .entry, or the start of
// a comment, inside either is not read. An unterminated comment or string
// is an error: ptxas would not read the text as this does.
func stripPTXComments(s string) (string, error) {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "//"):
			j := strings.IndexByte(s[i:], '\n')
			if j < 0 {
				return b.String(), nil
			}
			i += j
		case strings.HasPrefix(s[i:], "/*"):
			j := strings.Index(s[i+2:], "*/")
			if j < 0 {
				return "", fmt.Errorf("a /* comment is not closed")
			}
			i += j + 4
			b.WriteByte(' ')
		case s[i] == '"':
			j := i + 1
			for j < len(s) && s[j] != '"' && s[j] != '\n' {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(s) || s[j] != '"' {
				return "", fmt.Errorf("a string literal is not closed on its line")
			}
			b.WriteString(`""`)
			i = j + 1
		default:
			b.WriteByte(s[i])
			i++
		}
	}
	return b.String(), nil
}

// checkLaunchParams checks a launch's parameter kinds against kernel k's
// declared widths: as many parameters as the kernel takes; a buffer, u64
// or f64 (8-byte slot) for an 8-byte parameter; a u32 or f32 for one of 4
// bytes or less (the driver reads its low bytes). Wider parameters (an
// aggregate passed by value) cannot be passed and are refused.
func checkLaunchParams(name string, k ptxKernel, kinds []uint32) error {
	if len(kinds) != len(k.params) {
		return fmt.Errorf("kernel %s takes %d parameters, the launch passes %d", name, len(k.params), len(kinds))
	}
	for i, w := range k.params {
		wide := kinds[i] == paramBuffer || kinds[i] == paramU64 || kinds[i] == paramF64
		switch {
		case w > 8:
			return fmt.Errorf("kernel %s: parameter %d is a %d-byte value; idlepool_cuda passes buffers and scalars of up to 8 bytes", name, i, w)
		case w == 8 && !wide:
			return fmt.Errorf("kernel %s: parameter %d takes 8 bytes; pass a buffer, u64 or f64, not a %s", name, i, paramKindName(kinds[i]))
		case w < 8 && wide:
			return fmt.Errorf("kernel %s: parameter %d takes %d bytes; pass a u32 or f32, not a %s", name, i, w, paramKindName(kinds[i]))
		}
	}
	return nil
}

func paramKindName(k uint32) string {
	return [...]string{"buffer", "u32", "u64", "f32", "f64"}[k]
}
