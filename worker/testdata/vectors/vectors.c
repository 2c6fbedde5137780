// vectors.c is the determinism profile's test program (docs/determinism.md):
// it calls every function of wasi_snapshot_preview1 and writes one line per
// call to stdout: the call, its arguments, the errno it returned and, in
// hex, the bytes the host wrote to the call's result buffers (filled with
// 0xaa before the call, so that bytes the host left alone show as "aa").
// Any host that follows the profile writes the same lines for the same
// task; testdata/vectors/vectors.json holds them.
//
// It is built without a C library, so that the host calls in the record
// are exactly the ones below:
//
//	clang --target=wasm32-wasi -O2 -fno-builtin -nostdlib \
//	    -Wl,--no-entry -Wl,--export=_start -o vectors.wasm vectors.c
//
// The task's stdin chooses the exit status: its first byte, if it is a
// digit, is passed to proc_exit at the end.

typedef unsigned char u8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

#define WASI(name) __attribute__((import_module("wasi_snapshot_preview1"), import_name(#name)))

WASI(args_get) int args_get(u32 argv, u32 buf);
WASI(args_sizes_get) int args_sizes_get(u32 argc, u32 size);
WASI(environ_get) int environ_get(u32 env, u32 buf);
WASI(environ_sizes_get) int environ_sizes_get(u32 n, u32 size);
WASI(clock_res_get) int clock_res_get(u32 id, u32 res);
WASI(clock_time_get) int clock_time_get(u32 id, u64 precision, u32 t);
WASI(fd_advise) int fd_advise(u32 fd, u64 off, u64 len, u32 advice);
WASI(fd_allocate) int fd_allocate(u32 fd, u64 off, u64 len);
WASI(fd_close) int fd_close(u32 fd);
WASI(fd_datasync) int fd_datasync(u32 fd);
WASI(fd_fdstat_get) int fd_fdstat_get(u32 fd, u32 st);
WASI(fd_fdstat_set_flags) int fd_fdstat_set_flags(u32 fd, u32 flags);
WASI(fd_fdstat_set_rights) int fd_fdstat_set_rights(u32 fd, u64 base, u64 inh);
WASI(fd_filestat_get) int fd_filestat_get(u32 fd, u32 st);
WASI(fd_filestat_set_size) int fd_filestat_set_size(u32 fd, u64 size);
WASI(fd_filestat_set_times) int fd_filestat_set_times(u32 fd, u64 atim, u64 mtim, u32 flags);
WASI(fd_pread) int fd_pread(u32 fd, u32 iovs, u32 n, u64 off, u32 nread);
WASI(fd_prestat_get) int fd_prestat_get(u32 fd, u32 buf);
WASI(fd_prestat_dir_name) int fd_prestat_dir_name(u32 fd, u32 path, u32 len);
WASI(fd_pwrite) int fd_pwrite(u32 fd, u32 iovs, u32 n, u64 off, u32 nwritten);
WASI(fd_read) int fd_read(u32 fd, u32 iovs, u32 n, u32 nread);
WASI(fd_readdir) int fd_readdir(u32 fd, u32 buf, u32 len, u64 cookie, u32 used);
WASI(fd_renumber) int fd_renumber(u32 fd, u32 to);
WASI(fd_seek) int fd_seek(u32 fd, u64 off, u32 whence, u32 newoff);
WASI(fd_sync) int fd_sync(u32 fd);
WASI(fd_tell) int fd_tell(u32 fd, u32 off);
WASI(fd_write) int fd_write(u32 fd, u32 iovs, u32 n, u32 nwritten);
WASI(path_create_directory) int path_create_directory(u32 fd, u32 path, u32 len);
WASI(path_filestat_get) int path_filestat_get(u32 fd, u32 flags, u32 path, u32 len, u32 st);
WASI(path_filestat_set_times) int path_filestat_set_times(u32 fd, u32 flags, u32 path, u32 len, u64 atim, u64 mtim, u32 fst);
WASI(path_link) int path_link(u32 ofd, u32 oflags, u32 opath, u32 olen, u32 nfd, u32 npath, u32 nlen);
WASI(path_open) int path_open(u32 fd, u32 dirflags, u32 path, u32 len, u32 oflags, u64 base, u64 inh, u32 fdflags, u32 outfd);
WASI(path_readlink) int path_readlink(u32 fd, u32 path, u32 len, u32 buf, u32 buflen, u32 used);
WASI(path_remove_directory) int path_remove_directory(u32 fd, u32 path, u32 len);
WASI(path_rename) int path_rename(u32 fd, u32 opath, u32 olen, u32 nfd, u32 npath, u32 nlen);
WASI(path_symlink) int path_symlink(u32 opath, u32 olen, u32 fd, u32 npath, u32 nlen);
WASI(path_unlink_file) int path_unlink_file(u32 fd, u32 path, u32 len);
WASI(poll_oneoff) int poll_oneoff(u32 in, u32 out, u32 n, u32 nevents);
WASI(proc_exit) void proc_exit(u32 code);
WASI(proc_raise) int proc_raise(u32 sig);
WASI(sched_yield) int sched_yield(void);
WASI(random_get) int random_get(u32 buf, u32 len);
WASI(sock_accept) int sock_accept(u32 fd, u32 flags, u32 outfd);
WASI(sock_recv) int sock_recv(u32 fd, u32 iovs, u32 n, u32 flags, u32 len, u32 oflags);
WASI(sock_send) int sock_send(u32 fd, u32 iovs, u32 n, u32 flags, u32 len);
WASI(sock_shutdown) int sock_shutdown(u32 fd, u32 how);

// BAD is an address past the end of linear memory: calls that write there
// must answer EFAULT (21).
#define BAD 0xfffffff0u

static u8 out[256];  // result buffers of the calls
static u8 line[2048]; // the line being written
static u32 pos;
static u8 in[4096]; // stdin
static u32 inLen;
static u8 scratch[64];

#define P(x) ((u32)(unsigned long)(x))

static void fill(u8 *p, u32 n, u8 v) {
	for (u32 i = 0; i < n; i++) p[i] = v;
}

static void put(const char *s) {
	while (*s && pos < sizeof line) line[pos++] = (u8)*s++;
}

static void putu(u64 v) {
	char d[24];
	int n = 0;
	do {
		d[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (n && pos < sizeof line) line[pos++] = (u8)d[--n];
}

static void puthex(const u8 *p, u32 n) {
	static const char x[] = "0123456789abcdef";
	for (u32 i = 0; i < n && pos + 2 <= sizeof line; i++) {
		line[pos++] = (u8)x[p[i] >> 4];
		line[pos++] = (u8)x[p[i] & 15];
	}
}

static void flush(void) {
	u32 iov[2] = {P(line), pos};
	u32 n;
	fd_write(1, P(iov), 1, P(&n));
	pos = 0;
}

// rec writes "name args -> errno out" where out is the first n bytes of
// the result buffer, then prepares the buffer for the next call.
static void rec(const char *name, const char *args, int errno, u32 n) {
	put(name);
	put(" ");
	put(args);
	put(" -> ");
	putu((u32)errno);
	if (n) {
		put(" ");
		puthex(out, n);
	}
	put("\n");
	flush();
	fill(out, sizeof out, 0xaa);
}

static void put32(u8 *p, u32 v) {
	for (int i = 0; i < 4; i++) p[i] = (u8)(v >> (8 * i));
}

static void put64(u8 *p, u64 v) {
	for (int i = 0; i < 8; i++) p[i] = (u8)(v >> (8 * i));
}

// sub writes a poll_oneoff subscription of 48 bytes.
static void sub(u8 *p, u64 userdata, u8 type, u32 a, u64 timeout, u16 flags) {
	fill(p, 48, 0);
	put64(p, userdata);
	p[8] = type;
	put32(p + 16, a);
	put64(p + 24, timeout);
	p[40] = (u8)flags;
	p[41] = (u8)(flags >> 8);
}

void _start(void) {
	fill(out, sizeof out, 0xaa);
	u32 *o32 = (u32 *)out;
	u8 path[] = "input";

	// stdin, whole, in two iovecs (the second may stay empty).
	{
		u32 iov[4] = {P(in), 8, P(in + 8), sizeof in - 8};
		int e = fd_read(0, P(iov), 2, P(out));
		inLen = e == 0 ? o32[0] : 0;
		rec("fd_read", "0 [8,4088]", e, 4);
		e = fd_read(0, P(iov), 2, P(out));
		rec("fd_read", "0 [8,4088] again", e, 4);
		put("stdin ");
		puthex(in, inLen);
		put("\n");
		flush();
	}

	// args and environment.
	rec("args_sizes_get", "", args_sizes_get(P(out), P(out + 4)), 8);
	{
		// The pointers args_get writes are addresses in this module's
		// memory; the record holds them as offsets from the buffer, so
		// that it does not depend on where the linker put it.
		int e = args_get(P(out), P(out + 16));
		if (e == 0) o32[0] -= P(out + 16);
		rec("args_get", "(pointers as offsets)", e, 32);
	}
	rec("args_get", "bad", args_get(BAD, P(out)), 0);
	rec("environ_sizes_get", "", environ_sizes_get(P(out), P(out + 4)), 8);
	rec("environ_get", "", environ_get(P(out), P(out + 16)), 8);

	// clocks: 0 realtime, 1 monotonic, 2 process cputime, 3 thread cputime.
	for (u32 id = 0; id < 5; id++) {
		char a[2] = {(char)('0' + id), 0};
		rec("clock_res_get", a, clock_res_get(id, P(out)), 8);
	}
	for (int i = 0; i < 3; i++) {
		rec("clock_time_get", "0", clock_time_get(0, 0, P(out)), 8);
		rec("clock_time_get", "1 precision=1000", clock_time_get(1, 1000, P(out)), 8);
	}
	rec("clock_time_get", "2", clock_time_get(2, 0, P(out)), 8);
	rec("clock_time_get", "3", clock_time_get(3, 0, P(out)), 8);
	rec("clock_time_get", "1 bad", clock_time_get(1, 0, BAD), 0);
	rec("clock_time_get", "1", clock_time_get(1, 0, P(out)), 8);

	// random bytes: odd lengths, to show how the stream is cut.
	rec("random_get", "0", random_get(P(out), 0), 4);
	rec("random_get", "5", random_get(P(out), 5), 8);
	rec("random_get", "11", random_get(P(out), 11), 16);
	rec("random_get", "32", random_get(P(out), 32), 32);
	rec("random_get", "bad", random_get(BAD, 32), 0);
	rec("random_get", "3", random_get(P(out), 3), 4);

	// memory.grow: the task's memory limit is the module's maximum.
	{
		int before = __builtin_wasm_memory_grow(0, 0);
		int big = __builtin_wasm_memory_grow(0, 65535);
		int one = __builtin_wasm_memory_grow(0, 1);
		put("memory.grow 0 -> ");
		putu((u32)before);
		put("; 65535 -> ");
		put(big < 0 ? "-1" : "grown");
		put("; 1 -> ");
		putu((u32)one);
		put("\n");
		flush();
	}
	rec("sched_yield", "", sched_yield(), 0);
	rec("proc_raise", "9", proc_raise(9), 0);

	// poll_oneoff.
	{
		static u8 subs[48 * 4];
		sub(subs, 0x1111, 0, 1, 1000000000, 0); // clock, relative 1 s
		rec("poll_oneoff", "clock", poll_oneoff(P(subs), P(out), 1, P(out + 128)), 36);
		rec("poll_oneoff", "clock", poll_oneoff(P(subs), P(out), 1, P(out + 128)), 0);
		rec("clock_time_get", "1 after sleep", clock_time_get(1, 0, P(out)), 8);
		sub(subs, 0x2222, 0, 0, 5, 1); // clock, absolute
		rec("poll_oneoff", "abstime", poll_oneoff(P(subs), P(out), 1, P(out + 128)), 36);
		sub(subs, 0x3333, 0, 1, 5, 2); // clock, unknown flag
		rec("poll_oneoff", "badflags", poll_oneoff(P(subs), P(out), 1, P(out + 128)), 36);
		sub(subs, 0x4444, 1, 0, 0, 0);          // fd_read stdin
		sub(subs + 48, 0x5555, 0, 1, 7, 0);     // clock
		sub(subs + 96, 0x6666, 2, 1, 0, 0);     // fd_write stdout
		sub(subs + 144, 0x7777, 1, 9, 0, 0);    // fd_read of a closed fd
		rec("poll_oneoff", "read0,clock,write1,read9", poll_oneoff(P(subs), P(out), 4, P(out + 128)), 132);
		sub(subs, 0x8888, 2, 7, 0, 0); // fd_write of a closed fd
		sub(subs + 48, 0x9999, 1, 2, 0, 0); // fd_read stderr
		rec("poll_oneoff", "write7,read2", poll_oneoff(P(subs), P(out), 2, P(out + 128)), 132);
		sub(subs, 0xaaaa, 4, 0, 0, 0); // unknown type
		rec("poll_oneoff", "badtype", poll_oneoff(P(subs), P(out), 1, P(out + 128)), 36);
		sub(subs, 0xbbbb, 1, 0xffffffff, 0, 0); // negative fd
		rec("poll_oneoff", "fd-1", poll_oneoff(P(subs), P(out), 1, P(out + 128)), 36);
		rec("poll_oneoff", "none", poll_oneoff(P(subs), P(out), 0, P(out + 128)), 4);
		rec("poll_oneoff", "bad", poll_oneoff(BAD, P(out), 1, P(out + 128)), 4);
	}

	// descriptors: 0, 1, 2 are stdio; 3 would be the first preopen (none
	// without /input); 9 was never opened.
	static const u32 fds[] = {0, 1, 2, 3, 9};
	for (u32 i = 0; i < sizeof fds / sizeof fds[0]; i++) {
		u32 fd = fds[i];
		char a[3] = {(char)('0' + fd), 0, 0};
		u32 iov[2] = {P(scratch), 4};
		u32 iov0[2] = {P(scratch), 0};
		rec("fd_fdstat_get", a, fd_fdstat_get(fd, P(out)), 24);
		rec("fd_filestat_get", a, fd_filestat_get(fd, P(out)), 64);
		rec("fd_prestat_get", a, fd_prestat_get(fd, P(out)), 8);
		rec("fd_prestat_dir_name", a, fd_prestat_dir_name(fd, P(out), 8), 8);
		rec("fd_advise", a, fd_advise(fd, 0, 10, 0), 0);
		rec("fd_advise", "advice=9", fd_advise(fd, 0, 10, 9), 0);
		rec("fd_allocate", a, fd_allocate(fd, 0, 10), 0);
		rec("fd_datasync", a, fd_datasync(fd), 0);
		rec("fd_sync", a, fd_sync(fd), 0);
		rec("fd_fdstat_set_flags", a, fd_fdstat_set_flags(fd, 0), 0);
		rec("fd_fdstat_set_flags", "nonblock", fd_fdstat_set_flags(fd, 4), 0);
		rec("fd_fdstat_set_flags", "sync", fd_fdstat_set_flags(fd, 16), 0);
		rec("fd_fdstat_set_rights", a, fd_fdstat_set_rights(fd, 0, 0), 0);
		rec("fd_filestat_set_size", a, fd_filestat_set_size(fd, 0), 0);
		rec("fd_filestat_set_times", a, fd_filestat_set_times(fd, 0, 0, 0), 0);
		rec("fd_filestat_set_times", "now", fd_filestat_set_times(fd, 0, 0, 2 | 8), 0);
		rec("fd_pread", a, fd_pread(fd, P(iov), 1, 0, P(out)), 4);
		rec("fd_pwrite", a, fd_pwrite(fd, P(iov), 1, 0, P(out)), 4);
		rec("fd_seek", a, fd_seek(fd, 0, 1, P(out)), 8);
		rec("fd_tell", a, fd_tell(fd, P(out)), 8);
		rec("fd_readdir", a, fd_readdir(fd, P(out), 64, 0, P(out + 128)), 4);
		rec("fd_readdir", "short", fd_readdir(fd, P(out), 8, 0, P(out + 128)), 4);
		rec("fd_read", a, fd_read(fd, P(iov), 1, P(out)), 4);
		rec("fd_read", "empty iovec", fd_read(fd, P(iov0), 1, P(out)), 4);
		if (fd != 1) { // a write to stdout would enter the record
			rec("fd_write", a, fd_write(fd, P(iov0), 1, P(out)), 4);
		}
		rec("sock_accept", a, sock_accept(fd, 0, P(out)), 4);
		rec("sock_recv", a, sock_recv(fd, P(iov), 1, 0, P(out), P(out + 4)), 8);
		rec("sock_send", a, sock_send(fd, P(iov), 1, 0, P(out)), 4);
		rec("sock_shutdown", a, sock_shutdown(fd, 3), 0);
		rec("path_open", a, path_open(fd, 0, P(path), 5, 0, 0, 0, 0, P(out)), 4);
		rec("path_filestat_get", a, path_filestat_get(fd, 0, P(path), 5, P(out)), 64);
		rec("path_filestat_set_times", a, path_filestat_set_times(fd, 0, P(path), 5, 0, 0, 0), 0);
		rec("path_create_directory", a, path_create_directory(fd, P(path), 5), 0);
		rec("path_remove_directory", a, path_remove_directory(fd, P(path), 5), 0);
		rec("path_unlink_file", a, path_unlink_file(fd, P(path), 5), 0);
		rec("path_readlink", a, path_readlink(fd, P(path), 5, P(out), 16, P(out + 16)), 20);
		rec("path_link", a, path_link(fd, 0, P(path), 5, fd, P(path), 5), 0);
		rec("path_rename", a, path_rename(fd, P(path), 5, fd, P(path), 5), 0);
		rec("path_symlink", a, path_symlink(P(path), 5, fd, P(path), 5), 0);
	}
	{
		u32 iov[2] = {BAD, 4};
		rec("fd_write", "2 bad iovec", fd_write(2, P(iov), 1, P(out)), 4);
		rec("fd_read", "0 bad iovec", fd_read(0, P(iov), 1, P(out)), 4);
		rec("fd_fdstat_get", "2 bad", fd_fdstat_get(2, BAD), 0);
		u8 msg[] = "to stderr\n";
		u32 iov2[4] = {P(msg), 3, P(msg + 3), 7};
		rec("fd_write", "2 [3,7]", fd_write(2, P(iov2), 2, P(out)), 4);
	}
	{
		u8 abs[] = "/input", up[] = "../input", inner[] = "a/../input/";
		rec("path_open", "3 /input", path_open(3, 0, P(abs), 6, 0, 0, 0, 0, P(out)), 4);
		rec("path_open", "0 ../input", path_open(0, 0, P(up), 8, 0, 0, 0, 0, P(out)), 4);
		rec("path_open", "0 a/../input/", path_open(0, 0, P(inner), 11, 0, 0, 0, 0, P(out)), 4);
		rec("path_open", "0 empty", path_open(0, 0, P(inner), 0, 0, 0, 0, 0, P(out)), 4);
		rec("path_open", "0 bad", path_open(0, 0, BAD, 4, 0, 0, 0, 0, P(out)), 4);
		rec("path_readlink", "0 empty", path_readlink(0, P(inner), 0, P(out), 16, P(out + 16)), 0);
		rec("path_filestat_set_times", "9 bad flags", path_filestat_set_times(9, 0, P(inner), 3, 0, 0, 1 | 2), 0);
		rec("fd_filestat_set_times", "9 bad flags", fd_filestat_set_times(9, 0, 0, 1 | 2), 0);
		rec("fd_filestat_set_times", "2 bad flags", fd_filestat_set_times(2, 0, 0, 4 | 8), 0);
		rec("fd_filestat_set_times", "2 atim now", fd_filestat_set_times(2, 0, 0, 2), 0);
		rec("clock_time_get", "0 after set_times", clock_time_get(0, 0, P(out)), 8);
		rec("fd_prestat_dir_name", "2 len 0", fd_prestat_dir_name(2, P(out), 0), 0);
		rec("fd_allocate", "2 0 0", fd_allocate(2, 0, 0), 0);
		rec("fd_allocate", "2 negative", fd_allocate(2, 0, 0x8000000000000000ull), 0);
		rec("sock_send", "2 flags", sock_send(2, P(out), 0, 1, P(out)), 4);
		rec("environ_get", "bad", environ_get(BAD, BAD), 0);
		rec("args_sizes_get", "bad", args_sizes_get(BAD, P(out)), 4);
		rec("clock_res_get", "0 bad", clock_res_get(0, BAD), 0);
		rec("fd_prestat_get", "1 bad", fd_prestat_get(1, BAD), 0);
		rec("fd_filestat_get", "1 bad", fd_filestat_get(1, BAD), 0);
	}
	rec("fd_renumber", "9 4", fd_renumber(9, 4), 0);
	rec("fd_renumber", "2 4", fd_renumber(2, 4), 0);
	rec("fd_renumber", "4 2", fd_renumber(4, 2), 0);
	rec("fd_close", "9", fd_close(9), 0);
	rec("fd_close", "0", fd_close(0), 0);
	rec("fd_close", "0 again", fd_close(0), 0);
	rec("fd_fdstat_get", "0 closed", fd_fdstat_get(0, P(out)), 24);
	{
		static u8 subs[48 * 2];
		sub(subs, 0xcccc, 1, 2, 0, 0); // fd_read stderr, stdin closed
		rec("poll_oneoff", "read2 closed stdin", poll_oneoff(P(subs), P(out), 1, P(out + 128)), 36);
	}
	rec("clock_time_get", "0 last", clock_time_get(0, 0, P(out)), 8);
	rec("random_get", "8 last", random_get(P(out), 8), 8);

	u32 code = inLen > 0 && in[0] >= '0' && in[0] <= '9' ? in[0] - '0' : 0;
	put("exit ");
	putu(code);
	put("\n");
	flush();
	proc_exit(code);
}
