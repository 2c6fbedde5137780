//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"idlepool/job"
)

// The documentation's tests (docs/README.md, "The rule for contributors"):
// the runnable blocks of the guides run against the built idlepool, the
// commands of the other blocks name real commands, flags, settings and
// make targets, every code block parses, and every relative link and
// anchor resolves.

// docsRepoRoot is the checkout, from this package's directory.
const docsRepoRoot = "../.."

// docsChecked are the files whose blocks, commands and links are checked;
// docsLinked adds the files whose links and make targets are checked only.
func docsChecked(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md", "CONTRIBUTING.md", "examples/README.md"}
	guides, err := filepath.Glob(filepath.Join(docsRepoRoot, "docs", "*.md"))
	if err != nil || len(guides) == 0 {
		t.Fatalf("no docs/*.md: %v", err)
	}
	for _, g := range guides {
		files = append(files, filepath.ToSlash(strings.TrimPrefix(g, docsRepoRoot+string(filepath.Separator))))
	}
	return files
}

func docsLinked(t *testing.T) []string {
	return append(docsChecked(t), "RATIONALE.md")
}

// mdBlock is a fenced code block of a Markdown file.
type mdBlock struct {
	file     string
	line     int    // 1-based line of the opening fence
	lang     string // the info string's first word: "sh", "toml", ""
	body     string
	runnable bool
	attrs    map[string]string // of the <!-- runnable ... --> line
}

func (b mdBlock) where() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

// mdDoc is a Markdown file taken apart.
type mdDoc struct {
	file   string
	lines  []string
	blocks []mdBlock
	// prose is the text outside fenced blocks, with fenced lines blanked
	// (so offsets keep their line numbers) and code spans' contents
	// blanked too; spans holds the code spans with their lines.
	prose string
	spans []mdSpan
	// anchors are the link targets the file's headings (and HTML anchors)
	// make, as GitHub makes them.
	anchors map[string]bool
	// markerErrs are runnable markers not followed by a sh block.
	markerErrs []string
}

type mdSpan struct {
	line int
	text string
}

var (
	fenceRE     = regexp.MustCompile("^ {0,3}(`{3,}|~{3,})\\s*([^`\\s]*)")
	runnableRE  = regexp.MustCompile(`^<!--\s*runnable(\s[^>]*)?-->\s*$`)
	headingRE   = regexp.MustCompile(`^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	htmlAnchor  = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	mdLinkRE    = regexp.MustCompile(`!?\[([^\]]*)\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	inlineLink  = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	makeRE      = regexp.MustCompile(`(?:^|[\s;&|(])make((?:[ \t]+[^\s;&|)#]+)+)`)
	makeRuleRE  = regexp.MustCompile(`(?m)^([A-Za-z0-9_.-]+(?:[ \t]+[A-Za-z0-9_.-]+)*)[ \t]*&?:([^=]|$)`)
	helpFlagRE  = regexp.MustCompile(`(?m)^\s+-([A-Za-z0-9][A-Za-z0-9_-]*)(?:\s|$)`)
	settingKeyR = regexp.MustCompile(`(?m)^  ([a-z_][a-z0-9_]*(?:\.[A-Za-z]+\.[a-z_]+)?)\s{2,}\S`)
)

var docCache sync.Map // file -> *mdDoc

// readDoc parses a Markdown file of the checkout, by its path from the
// repository root.
func readDoc(t *testing.T, file string) *mdDoc {
	t.Helper()
	if d, ok := docCache.Load(file); ok {
		return d.(*mdDoc)
	}
	b, err := os.ReadFile(filepath.Join(docsRepoRoot, file))
	if err != nil {
		t.Fatal(err)
	}
	d := parseDoc(file, string(b))
	docCache.Store(file, d)
	return d
}

func parseDoc(file, text string) *mdDoc {
	d := &mdDoc{file: file, lines: strings.Split(text, "\n"), anchors: map[string]bool{}}
	prose := make([]string, len(d.lines))
	var (
		inFence   bool
		fence     string // the opening fence's run of backticks or tildes
		cur       mdBlock
		body      []string
		marker    map[string]string // a runnable marker waiting for its block
		markerAt  int
		slugCount = map[string]int{}
	)
	for i, line := range d.lines {
		if inFence {
			if strings.HasPrefix(strings.TrimLeft(line, " "), fence[:1]) {
				run := strings.TrimLeft(line, " ")
				n := len(run) - len(strings.TrimLeft(run, fence[:1]))
				if n >= len(fence) && strings.TrimSpace(run[n:]) == "" {
					inFence = false
					cur.body = strings.Join(body, "\n")
					d.blocks = append(d.blocks, cur)
					continue
				}
			}
			body = append(body, line)
			continue
		}
		if m := fenceRE.FindStringSubmatch(line); m != nil {
			inFence, fence, body = true, m[1], nil
			cur = mdBlock{file: file, line: i + 1, lang: m[2]}
			if marker != nil {
				if cur.lang != "sh" {
					d.markerErrs = append(d.markerErrs, fmt.Sprintf("%s:%d: a runnable marker precedes a %q block; only sh blocks run", file, markerAt, cur.lang))
				}
				cur.runnable, cur.attrs, marker = true, marker, nil
			}
			continue
		}
		if m := runnableRE.FindStringSubmatch(line); m != nil {
			if marker != nil {
				d.markerErrs = append(d.markerErrs, fmt.Sprintf("%s:%d: a runnable marker with no block after it", file, markerAt))
			}
			marker, markerAt = map[string]string{}, i+1
			for f := range strings.FieldsSeq(m[1]) {
				k, v, _ := strings.Cut(f, "=")
				marker[k] = v
			}
			continue
		}
		if marker != nil && strings.TrimSpace(line) != "" {
			d.markerErrs = append(d.markerErrs, fmt.Sprintf("%s:%d: a runnable marker not followed by a sh block", file, markerAt))
			marker = nil
		}
		prose[i] = line
		if m := headingRE.FindStringSubmatch(line); m != nil {
			s := githubSlug(m[2])
			if n := slugCount[s]; n > 0 {
				d.anchors[fmt.Sprintf("%s-%d", s, n)] = true
			} else {
				d.anchors[s] = true
			}
			slugCount[s]++
		}
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			d.anchors[m[1]] = true
		}
	}
	if marker != nil {
		d.markerErrs = append(d.markerErrs, fmt.Sprintf("%s:%d: a runnable marker at the end of the file", file, markerAt))
	}
	d.prose, d.spans = codeSpans(strings.Join(prose, "\n"))
	return d
}

// codeSpans returns text with the contents of its code spans blanked
// (newlines kept), and the spans.
func codeSpans(text string) (string, []mdSpan) {
	b := []byte(text)
	var spans []mdSpan
	for i := 0; i < len(b); {
		if b[i] != '`' {
			i++
			continue
		}
		n := 0
		for i+n < len(b) && b[i+n] == '`' {
			n++
		}
		open := strings.Repeat("`", n)
		end := -1
		for j := i + n; j < len(b); {
			k := bytes.Index(b[j:], []byte(open))
			if k < 0 {
				break
			}
			k += j
			m := 0
			for k+m < len(b) && b[k+m] == '`' {
				m++
			}
			if m == n {
				end = k
				break
			}
			j = k + m
		}
		if end < 0 {
			i += n
			continue
		}
		spans = append(spans, mdSpan{line: bytes.Count(b[:i], []byte("\n")) + 1, text: strings.TrimSpace(string(b[i+n : end]))})
		for j := i; j < end+n; j++ {
			if b[j] != '\n' {
				b[j] = ' '
			}
		}
		i = end + n
	}
	return string(b), spans
}

// githubSlug is the anchor GitHub gives a heading: its text as rendered (code
// spans' contents, links' text, no emphasis), lower case, without
// punctuation other than hyphens and underscores, spaces as hyphens.
func githubSlug(heading string) string {
	h := inlineLink.ReplaceAllString(heading, "$1")
	h = strings.ReplaceAll(h, "`", "")
	h = strings.ReplaceAll(h, "*", "")
	var s strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			s.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.IsMark(r):
			s.WriteRune(r)
		}
	}
	return s.String()
}

func TestDocsSlug(t *testing.T) {
	for _, tc := range []struct{ heading, want string }{
		{"The GPU host module `idlepool_cuda`", "the-gpu-host-module-idlepool_cuda"},
		{"gpupi — Monte Carlo pi on a GPU or a CPU (`gpupi/gpupi.toml`)", "gpupi--monte-carlo-pi-on-a-gpu-or-a-cpu-gpupigpupitoml"},
		{"It always waits: \"idle time unknown\"", "it-always-waits-idle-time-unknown"},
		{"Running a relay (TURN)", "running-a-relay-turn"},
		{"The donor's guide", "the-donors-guide"},
	} {
		if got := githubSlug(tc.heading); got != tc.want {
			t.Errorf("githubSlug(%q) = %q, want %q", tc.heading, got, tc.want)
		}
	}
}

func TestDocsParse(t *testing.T) {
	d := parseDoc("x.md", "# A\n\n<!-- runnable timeout=1m -->\n```sh\necho `a`\n```\n\n````\n<!-- runnable -->\n```sh\nnot a block\n```\n````\n\nSee `make pi` and [b](b.md#c).\n## A\n")
	if len(d.blocks) != 2 || !d.blocks[0].runnable || d.blocks[0].attrs["timeout"] != "1m" || d.blocks[0].body != "echo `a`" || d.blocks[0].line != 4 {
		t.Errorf("blocks = %+v", d.blocks)
	}
	if d.blocks[1].runnable || d.blocks[1].lang != "" || !strings.Contains(d.blocks[1].body, "<!-- runnable -->") {
		t.Errorf("a marker inside a four-backtick block was taken as one: %+v", d.blocks[1])
	}
	if len(d.markerErrs) != 0 {
		t.Errorf("marker errors: %v", d.markerErrs)
	}
	if !d.anchors["a"] || !d.anchors["a-1"] {
		t.Errorf("anchors = %v", d.anchors)
	}
	if len(d.spans) != 1 || d.spans[0].text != "make pi" || d.spans[0].line != 15 {
		t.Errorf("spans = %+v", d.spans)
	}
	if m := mdLinkRE.FindAllStringSubmatch(d.prose, -1); len(m) != 1 || m[0][2] != "b.md#c" {
		t.Errorf("links = %q", m)
	}
	if e := parseDoc("y.md", "<!-- runnable -->\ntext\n").markerErrs; len(e) != 1 {
		t.Errorf("a marker before prose: errors %v", e)
	}
}

// readmeWidth is the longest a line of the README's prose may be, in
// characters.
const readmeWidth = 100

func TestDocsReadmeIsShort(t *testing.T) {
	d := readDoc(t, "README.md")
	if n := len(d.lines); n > 250 {
		t.Errorf("README.md has %d lines; it stays under about 200 (docs/README.md says where the rest goes)", n)
	}
	// Its prose is wrapped, so that its length is counted in lines a
	// reader reads: a paragraph on one line of thousands of characters
	// passed the count above. Code blocks, tables and images are left
	// as they are.
	for i, line := range strings.Split(d.prose, "\n") {
		if n := utf8.RuneCountInString(line); n > readmeWidth && !strings.HasPrefix(line, "|") && !strings.HasPrefix(line, "![") {
			t.Errorf("README.md:%d is %d characters long; wrap its prose at %d", i+1, n, readmeWidth)
		}
	}
	runnable := 0
	for _, b := range d.blocks {
		if b.runnable {
			runnable++
		}
	}
	if runnable == 0 {
		t.Error("README.md has no runnable block: its tour must run")
	}
}

func TestDocsLinks(t *testing.T) {
	for _, file := range docsLinked(t) {
		d := readDoc(t, file)
		for _, e := range d.markerErrs {
			t.Error(e)
		}
		for _, m := range mdLinkRE.FindAllStringSubmatchIndex(d.prose, -1) {
			target := d.prose[m[4]:m[5]]
			line := strings.Count(d.prose[:m[0]], "\n") + 1
			if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			to := file
			if path != "" {
				to = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(file), path)))
				if _, err := os.Stat(filepath.Join(docsRepoRoot, to)); err != nil {
					t.Errorf("%s:%d: the link to %s leads nowhere: %v", file, line, target, err)
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(to, ".md") {
				t.Errorf("%s:%d: the link %s has an anchor into a file that is not Markdown", file, line, target)
				continue
			}
			if !readDoc(t, to).anchors[anchor] {
				t.Errorf("%s:%d: the link %s names no heading of %s", file, line, target, to)
			}
		}
	}
}

// makeTargets are the rules of the Makefile.
func makeTargets(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(docsRepoRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, m := range makeRuleRE.FindAllStringSubmatch(string(b), -1) {
		for f := range strings.FieldsSeq(m[1]) {
			targets[f] = true
		}
	}
	return targets
}

func TestDocsMakeTargets(t *testing.T) {
	targets := makeTargets(t)
	if !targets["pi"] || !targets["test"] {
		t.Fatalf("the Makefile's rules were not read: %v", targets)
	}
	check := func(where, code string) {
		for _, m := range makeRE.FindAllStringSubmatch(code, -1) {
			args := strings.Fields(m[1])
			if slices.Contains(args, "-C") || slices.Contains(args, "-f") {
				continue // another Makefile
			}
			for _, a := range args {
				if strings.Contains(a, "=") || strings.HasPrefix(a, "-") || strings.HasPrefix(a, "$") || makePlaceholder.MatchString(a) {
					continue // a variable, a flag, or TARGET in prose
				}
				if !targets[a] {
					t.Errorf("%s: `make %s` names no rule of the Makefile", where, a)
				}
			}
		}
	}
	for _, file := range docsLinked(t) {
		d := readDoc(t, file)
		for _, s := range d.spans {
			check(fmt.Sprintf("%s:%d", file, s.line), s.text)
		}
		for _, b := range d.blocks {
			if b.lang == "sh" {
				check(b.where(), stripComments(b.body))
			}
		}
	}
}

// stripComments drops shell comments (from a # that starts a word, outside
// quotes) from every line of script.
func stripComments(script string) string {
	var out []string
	for line := range strings.SplitSeq(script, "\n") {
		var quote rune
		prev := ' '
		cut := len(line)
		for i, r := range line {
			switch {
			case quote != 0:
				if r == quote {
					quote = 0
				}
			case r == '\'' || r == '"':
				quote = r
			case r == '#' && unicode.IsSpace(prev):
				cut = i
			}
			if cut < len(line) {
				break
			}
			prev = r
		}
		out = append(out, line[:cut])
	}
	return strings.Join(out, "\n")
}

// shellCommands splits a shell script into simple commands, each a list of
// words with quotes removed: at ; && || | & ( ) and $( and at line ends
// (after joining continued lines). Redirections and their targets and
// comments are dropped.
func shellCommands(script string) [][]string {
	script = strings.ReplaceAll(script, "\\\n", " ")
	var (
		cmds  [][]string
		words []string
		word  strings.Builder
		inW   bool
	)
	endWord := func() {
		if inW {
			words = append(words, word.String())
		}
		word.Reset()
		inW = false
	}
	endCmd := func() {
		endWord()
		if len(words) > 0 {
			cmds = append(cmds, words)
		}
		words = nil
	}
	rs := []rune(script)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case r == '\'':
			inW = true
			for i++; i < len(rs) && rs[i] != '\''; i++ {
				word.WriteRune(rs[i])
			}
		case r == '"':
			inW = true
			for i++; i < len(rs) && rs[i] != '"'; i++ {
				if rs[i] == '\\' && i+1 < len(rs) {
					i++
				}
				word.WriteRune(rs[i])
			}
		case r == '\\' && i+1 < len(rs):
			inW = true
			i++
			word.WriteRune(rs[i])
		case r == '#' && !inW:
			for i < len(rs) && rs[i] != '\n' {
				i++
			}
			endCmd()
		case r == '$' && i+1 < len(rs) && rs[i+1] == '(':
			endCmd()
			i++
		case r == '\n' || r == ';' || r == '&' || r == '|' || r == '(' || r == ')':
			endCmd()
		case r == '>' || r == '<':
			// A redirection: drop it and its target (a word of its own or
			// glued to it, "2>/dev/null").
			if inW && strings.Trim(word.String(), "0123456789") == "" {
				word.Reset()
				inW = false
			}
			endWord()
			for i+1 < len(rs) && (rs[i+1] == '>' || rs[i+1] == '&') {
				i++
			}
			for i+1 < len(rs) && (rs[i+1] == ' ' || rs[i+1] == '\t') {
				i++
			}
			for i+1 < len(rs) && !unicode.IsSpace(rs[i+1]) && !strings.ContainsRune(";&|()", rs[i+1]) {
				i++
			}
		case unicode.IsSpace(r):
			endWord()
		default:
			inW = true
			word.WriteRune(r)
		}
	}
	endCmd()
	return cmds
}

func TestDocsShellCommands(t *testing.T) {
	got := shellCommands("A=1 idlepool --home \"$d/x\" join $POOL --always 2> \"$d/a.log\" &  # a donor\n" +
		"idlepool settings set 'hours=Mon-Fri 22:00-07:00; Sat,Sun' cores=75% \\\n  idle_for=10m\n" +
		"POOL=$(sed -n 's/.* at //p' f) && make -C x y; echo ok>/dev/null | cat")
	want := [][]string{
		{"A=1", "idlepool", "--home", "$d/x", "join", "$POOL", "--always"},
		{"idlepool", "settings", "set", "hours=Mon-Fri 22:00-07:00; Sat,Sun", "cores=75%", "idle_for=10m"},
		{"POOL="}, {"sed", "-n", "s/.* at //p", "f"}, {"make", "-C", "x", "y"}, {"echo", "ok"}, {"cat"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("shellCommands:\n got %q\nwant %q", got, want)
	}
}

// cliHelp runs `idlepool ARGS... -h` once per ARGS and returns what it
// printed.
type cliHelp struct {
	home string
	mu   sync.Mutex
	seen map[string]string
}

func (h *cliHelp) help(t *testing.T, args ...string) string {
	t.Helper()
	key := strings.Join(args, " ")
	h.mu.Lock()
	defer h.mu.Unlock()
	if out, ok := h.seen[key]; ok {
		return out
	}
	cmd := exec.CommandContext(t.Context(), binPath, append(append([]string{"--home", h.home}, args...), "-h")...)
	out, _ := cmd.CombinedOutput()
	h.seen[key] = string(out)
	return string(out)
}

// subcommands lists the words that may follow `idlepool CMD` according to
// its help ("idlepool jobs accept|refuse|clear ..."): none for a command
// whose next argument is a name or a path.
func subcommands(help, cmd string) []string {
	re := regexp.MustCompile(`idlepool ` + regexp.QuoteMeta(cmd) + ` ([a-z][a-z-]*(?:\|[a-z][a-z-]*)*)(?:\s|$)`)
	var subs []string
	for _, m := range re.FindAllStringSubmatch(help, -1) {
		subs = append(subs, strings.Split(m[1], "|")...)
	}
	return subs
}

var (
	negativeNumberArg = regexp.MustCompile(`^-[0-9.]`)
	makePlaceholder   = regexp.MustCompile(`^[A-Z][A-Z_]*$`)
)

// docsErrorer is where checkCommand reports: a *testing.T, or a recorder in
// the checker's own test.
type docsErrorer interface {
	Errorf(format string, args ...any)
}

// docsRecorder is an errorer that keeps what it was told.
type docsRecorder struct{ msgs []string }

func (r *docsRecorder) Errorf(format string, args ...any) {
	r.msgs = append(r.msgs, fmt.Sprintf(format, args...))
}

// checkCommand checks one `idlepool ...` command of a block that does not
// run: the command, its sub-command, its flags and, for `settings set`,
// its keys must be real. help returns what `idlepool ARGS... -h` prints.
func checkCommand(t docsErrorer, help func(args ...string) string, where string, words []string) {
	i := 1
	for i < len(words) && strings.HasPrefix(words[i], "-") {
		switch f := strings.TrimLeft(words[i], "-"); {
		case f == "home":
			i += 2
		case strings.HasPrefix(f, "home=") || f == "v":
			i++
		case f == "h" || f == "help":
			return
		default:
			t.Errorf("%s: %q is no global flag of idlepool (before the command)", where, words[i])
			return
		}
	}
	if i >= len(words) {
		return
	}
	cmd := words[i]
	args := words[i+1:]
	usage := help(cmd)
	if strings.Contains(usage, "unknown command") {
		t.Errorf("%s: `idlepool %s` is no command: %s", where, cmd, strings.TrimSpace(usage))
		return
	}
	path := []string{cmd}
	if subs := subcommands(usage, cmd); len(subs) > 0 && len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		if !slices.Contains(subs, args[0]) {
			t.Errorf("%s: `idlepool %s %s`: %s has no sub-command %q (it has %s)", where, cmd, args[0], cmd, args[0], strings.Join(subs, ", "))
			return
		}
		path = append(path, args[0])
		args = args[1:]
	}
	flags := usage
	if len(path) > 1 {
		flags = help(path...)
	}
	known := map[string]bool{}
	for _, m := range helpFlagRE.FindAllStringSubmatch(flags, -1) {
		known[m[1]] = true
	}
	for _, a := range args {
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") || negativeNumberArg.MatchString(a) {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !known[name] {
			t.Errorf("%s: `idlepool %s` has no flag %s", where, strings.Join(path, " "), a)
		}
	}
	if slices.Equal(path, []string{"settings", "set"}) {
		keys := map[string]bool{}
		for _, m := range settingKeyR.FindAllStringSubmatch(usage, -1) {
			keys[m[1]] = true
		}
		for _, a := range args {
			k, _, ok := strings.Cut(a, "=")
			if !ok || strings.HasPrefix(a, "-") {
				continue
			}
			if parts := strings.Split(k, "."); len(parts) == 3 && parts[0] == "gpu" {
				k = "gpu.UUID." + parts[2]
			}
			if !keys[k] {
				t.Errorf("%s: `idlepool settings set` has no key %q", where, k)
			}
		}
	}
}

// isIdlepool reports whether a command's first word (after variable
// assignments and sudo) runs the idlepool command line, and where.
func isIdlepool(words []string) ([]string, bool) {
	for len(words) > 0 && (strings.Contains(words[0], "=") && !strings.HasPrefix(words[0], "-") || words[0] == "sudo" || words[0] == "exec") {
		words = words[1:]
	}
	if len(words) == 0 {
		return nil, false
	}
	switch filepath.Base(words[0]) {
	case "idlepool", "idlepool.exe":
		return words, true
	}
	return nil, false
}

func TestDocsCommands(t *testing.T) {
	h := &cliHelp{home: t.TempDir(), seen: map[string]string{}}
	help := func(args ...string) string { return h.help(t, args...) }
	checked := 0
	for _, file := range docsChecked(t) {
		for _, b := range readDoc(t, file).blocks {
			var script string
			switch {
			case b.runnable:
				continue // it runs (TestDocsRunnable)
			case b.lang == "sh":
				script = b.body
			case b.lang == "":
				// A transcript: the lines a person typed start with "$ ".
				for line := range strings.SplitSeq(b.body, "\n") {
					if rest, ok := strings.CutPrefix(line, "$ "); ok {
						script += rest + "\n"
					}
				}
			default:
				continue
			}
			for _, words := range shellCommands(script) {
				if w, ok := isIdlepool(words); ok {
					checkCommand(t, help, b.where(), w)
					checked++
				}
			}
		}
	}
	if checked == 0 {
		t.Error("no idlepool command found in the documentation's blocks")
	}
	t.Logf("checked %d idlepool commands of blocks that do not run", checked)
	// The check itself finds a wrong command, sub-command, flag and key,
	// and passes right ones.
	for _, tc := range []struct {
		words []string
		bad   bool
	}{
		{[]string{"idlepool", "frobnicate"}, true},
		{[]string{"idlepool", "jobs", "frobnicate"}, true},
		{[]string{"idlepool", "run", "x.toml", "--frobnicate"}, true},
		{[]string{"idlepool", "settings", "set", "frobnicate=1"}, true},
		{[]string{"idlepool", "--home", "h", "jobs", "weight", "-1", "--pool", "u"}, false},
		{[]string{"bin/idlepool", "settings", "set", "gpu.GPU-1234.use=true", "cores=2"}, false},
	} {
		rec := &docsRecorder{}
		checkCommand(rec, help, "self-test", tc.words)
		if bad := len(rec.msgs) > 0; bad != tc.bad {
			t.Errorf("checking %q: found fault %v, want %v: %q", tc.words, bad, tc.bad, rec.msgs)
		}
	}
}

// TestDocsCode checks the other code blocks: TOML must be (part of) a
// manifest, JSON valid, and Go compile (a whole program, which then runs
// as a job) or parse (a fragment).
func TestDocsCode(t *testing.T) {
	base := "name = \"docs\"\nprogram = \"prog.wasm\"\n[split]\nrule = \"range\"\ntasks = 2\n[[merge]]\nfield = \"x\"\nrule = \"sum\"\n"
	commented := regexp.MustCompile(`(?m)^# ?(\[[a-z._]+\]|[a-z_]+ = )`)
	var programs []mdBlock
	for _, file := range docsChecked(t) {
		for _, b := range readDoc(t, file).blocks {
			switch b.lang {
			case "toml":
				if regexp.MustCompile(`(?m)^shards\s*=`).MatchString(b.body) {
					// A training file (idlepool train), commented options
					// uncommented too.
					for _, body := range []string{b.body, commented.ReplaceAllString(b.body, "$1")} {
						path := filepath.Join(t.TempDir(), "train.toml")
						if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
							t.Fatal(err)
						}
						if _, err := loadTrainFile(path); err != nil {
							t.Errorf("%s: the training file does not load: %v", b.where(), err)
						}
					}
					continue
				}
				if regexp.MustCompile(`(?m)^program\s*=`).MatchString(b.body) {
					if _, err := job.ParseManifest(b.where(), t.TempDir(), []byte(b.body)); err != nil {
						t.Errorf("%s: the manifest does not parse: %v", b.where(), err)
					}
					// Its commented options, uncommented, are real options too.
					all := commented.ReplaceAllString(b.body, "$1")
					if _, err := job.ParseManifest(b.where(), t.TempDir(), []byte(all)); err != nil {
						t.Errorf("%s: the manifest with its commented options uncommented does not parse: %v", b.where(), err)
					}
					continue
				}
				if _, err := job.ParseManifest(b.where(), t.TempDir(), []byte(base+"\n"+b.body+"\n")); err != nil {
					t.Errorf("%s: the block is not part of a manifest: %v", b.where(), err)
				}
			case "json":
				if !json.Valid([]byte(b.body)) {
					t.Errorf("%s: the block is not valid JSON", b.where())
				}
			case "go":
				if strings.HasPrefix(strings.TrimSpace(b.body), "package ") {
					programs = append(programs, b)
					continue
				}
				src := "package p\n\nfunc _() {\n" + b.body + "\n}\n"
				if _, err := parser.ParseFile(token.NewFileSet(), b.where(), src, parser.AllErrors); err != nil {
					t.Errorf("%s: the Go fragment does not parse as statements: %v", b.where(), err)
				}
			}
		}
	}
	for _, b := range programs {
		t.Run(blockName(b), func(t *testing.T) { runDocProgram(t, b) })
	}
}

// runDocProgram builds a Go program of the docs for wasip1 in a module of
// its own and runs it as a two-task job: it reads {"samples"} and writes
// numbers, as the author's guide's minimal program does.
func runDocProgram(t *testing.T, b mdBlock) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module docprogram\n\ngo 1.26\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(b.body+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	build := exec.CommandContext(t.Context(), "go", "build", "-o", "prog.wasm", ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "GOFLAGS=-mod=mod")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%s: the program does not build for wasip1: %v\n%s", b.where(), err, out)
	}
	manifest := filepath.Join(dir, "job.toml")
	text := "name = \"docprogram\"\nprogram = \"prog.wasm\"\n[split]\nrule = \"range\"\ntasks = 2\n[split.params]\nsamples = 1000\n" +
		"[[merge]]\nfield = \"samples\"\nrule = \"sum\"\n"
	if err := os.WriteFile(manifest, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	r, _ := runJSON(t, t.TempDir(), manifest)
	if r.Tasks.OK != 2 || string(r.Result["samples"]) == "" {
		t.Errorf("%s: the program's job gave %+v", b.where(), r)
	}
}

func blockName(b mdBlock) string {
	return strings.ReplaceAll(b.file, "/", "_") + ":" + strconv.Itoa(b.line)
}

// docsEnv is what the runnable blocks run with.
type docsEnv struct {
	bin   string // a directory holding only the idlepool under test
	cache string // the compilation cache the blocks share
	repo  string // the checkout, absolute
}

func newDocsEnv(t *testing.T) *docsEnv {
	t.Helper()
	repo, err := filepath.Abs(docsRepoRoot)
	if err != nil {
		t.Fatal(err)
	}
	e := &docsEnv{bin: t.TempDir(), cache: t.TempDir(), repo: repo}
	if err := os.Symlink(binPath, filepath.Join(e.bin, "idlepool")); err != nil {
		t.Fatal(err)
	}
	// The programs' compiled code is the package's tests' (shareCompiled).
	if err := os.Symlink(compiled, filepath.Join(e.cache, "wazero")); err != nil {
		t.Fatal(err)
	}
	return e
}

// workDir makes a fresh directory laid out as the checkout after `make
// build examples`: examples/NAME/ with the example's files and its built
// program.
func (e *docsEnv) workDir(t *testing.T) string {
	t.Helper()
	work := t.TempDir()
	for _, name := range []string{"pi", "ising", "kfold", "csvstats"} {
		dst := filepath.Join(work, "examples", name)
		if err := os.MkdirAll(dst, 0o755); err != nil {
			t.Fatal(err)
		}
		entries, err := os.ReadDir(filepath.Join(e.repo, "examples", name))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range entries {
			if f.IsDir() || strings.HasSuffix(f.Name(), ".wasm") || f.Name() == "data.csv" {
				continue
			}
			if err := os.Symlink(filepath.Join(e.repo, "examples", name, f.Name()), filepath.Join(dst, f.Name())); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink(wasm[name], filepath.Join(dst, name+".wasm")); err != nil {
			t.Fatal(err)
		}
	}
	return work
}

// defaultBlockTimeout bounds a runnable block without a timeout attribute
// when the test binary has no deadline; with one (go test -timeout), such
// a block may run until 30 s before it, so that a busy machine makes a
// block slow, never wrong. A block that never ends still fails, naming
// itself, before the binary's own timeout kills everything.
const defaultBlockTimeout = 20 * time.Minute

func TestDocsRunnable(t *testing.T) {
	e := newDocsEnv(t)
	var blocks []mdBlock
	for _, file := range docsChecked(t) {
		for _, b := range readDoc(t, file).blocks {
			if b.runnable {
				blocks = append(blocks, b)
			}
		}
	}
	if len(blocks) == 0 {
		t.Fatal("no runnable block in the documentation")
	}
	for _, b := range blocks {
		t.Run(blockName(b), func(t *testing.T) {
			if err := e.run(t, b); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestDocsRunnableHarness checks that a failing block, one past its time
// limit and one that leaves a process behind fail, each saying so.
func TestDocsRunnableHarness(t *testing.T) {
	defer func(g time.Duration) { blockGroupGrace = g }(blockGroupGrace)
	blockGroupGrace = time.Second
	e := newDocsEnv(t)
	for _, tc := range []struct {
		body, timeout, want string
	}{
		{"test -f examples/pi/pi.wasm && test -f examples/pi/quick.toml\nidlepool help >/dev/null\ntest -d \"$IDLEPOOL_REPO/docs\"", "", ""},
		{"echo about to fail\nfalse\necho not reached", "", "x.md:7: the block failed (exit status 1)"},
		{"echo $undefined_variable", "", "x.md:7: the block failed"},
		{"sleep 60 & wait", "1s", "x.md:7: the block did not finish within 1s"},
		{"sleep 60 &", "", "x.md:7: the block left processes running"},
	} {
		b := mdBlock{file: "x.md", line: 7, lang: "sh", body: tc.body, runnable: true, attrs: map[string]string{}}
		if tc.timeout != "" {
			b.attrs["timeout"] = tc.timeout
		}
		err := e.run(t, b)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("block %q: %v", tc.body, err)
		case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want)):
			t.Errorf("block %q: error %v, want one starting %q", tc.body, err, tc.want)
		}
	}
}

// run runs one block with bash in a fresh directory and home, and returns
// an error naming the block when it fails, outlives its time limit or
// leaves a process behind.
func (e *docsEnv) run(t *testing.T, b mdBlock) error {
	limit := defaultBlockTimeout
	if d, ok := t.Deadline(); ok {
		limit = time.Until(d)
	}
	if v, ok := b.attrs["timeout"]; ok {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("%s: timeout=%q is not a duration such as 60s", b.where(), v)
		}
		limit = d
	}
	if d, ok := t.Deadline(); ok && time.Until(d)-30*time.Second < limit {
		limit = max(time.Until(d)-30*time.Second, time.Second)
	}
	work := e.workDir(t)
	tmp := t.TempDir()
	home := filepath.Join(tmp, "home")
	ipHome := filepath.Join(tmp, "idlepool")
	for _, d := range []string{home, ipHome} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(e.cache, filepath.Join(ipHome, "cache")); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(tmp, "block.sh")
	if err := os.WriteFile(script, []byte(b.body+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(filepath.Join(tmp, "output"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()

	ctx, cancel := context.WithTimeout(t.Context(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "--noprofile", "--norc", "-e", "-u", "-o", "pipefail", script)
	cmd.Dir = work
	cmd.Env = blockEnv(os.Environ(), map[string]string{
		"PATH":            e.bin + string(os.PathListSeparator) + os.Getenv("PATH"),
		"HOME":            home,
		"IDLEPOOL_HOME":   ipHome,
		"IDLEPOOL_REPO":   e.repo,
		"XDG_CONFIG_HOME": filepath.Join(home, ".config"),
		"XDG_DATA_HOME":   filepath.Join(home, ".local", "share"),
		"XDG_CACHE_HOME":  filepath.Join(home, ".cache"),
		"TMPDIR":          tmp,
	})
	// Everything the block starts is in its process group, which a
	// timeout kills whole. The output goes to a file, so that a process
	// left behind cannot hold Wait up on a pipe.
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	start := time.Now()
	runErr := cmd.Run()
	took := time.Since(start)
	pgid := 0
	if cmd.Process != nil {
		pgid = cmd.Process.Pid
	}
	left := pgid > 0 && stopBlockGroup(pgid)
	output := docsOutputTail(filepath.Join(tmp, "output"), 6000)
	switch {
	case ctx.Err() != nil && t.Context().Err() == nil:
		return fmt.Errorf("%s: the block did not finish within %v (give it more with <!-- runnable timeout=... --> if it must take longer); it printed:\n%s", b.where(), limit, output)
	case runErr != nil:
		return fmt.Errorf("%s: the block failed (%v) after %v; it printed:\n%s", b.where(), runErr, took.Round(time.Millisecond), output)
	case left:
		return fmt.Errorf("%s: the block left processes running (a block must stop what it starts); it printed:\n%s", b.where(), output)
	}
	t.Logf("%s: ran in %v", b.where(), took.Round(time.Millisecond))
	return nil
}

// blockEnv returns env with the variables of set replaced or added.
func blockEnv(env []string, set map[string]string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; !ok {
			out = append(out, kv)
		}
	}
	for k, v := range set {
		out = append(out, k+"="+v)
	}
	return out
}

// blockGroupGrace is how long the processes a block started may take to end
// after the block did (they may be on their way out).
var blockGroupGrace = 5 * time.Second

// stopBlockGroup reports whether processes of the process group pgid are still
// alive groupGrace after its leader ended, and kills them.
func stopBlockGroup(pgid int) bool {
	deadline := time.Now().Add(blockGroupGrace)
	for blockGroupAlive(pgid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// blockGroupAlive reports whether a process of group pgid is alive: from /proc
// where there is one (a zombie waiting for a reaper does not count), else
// by signal 0.
func blockGroupAlive(pgid int) bool {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return syscall.Kill(-pgid, 0) == nil
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 2 && fields[0] != "Z" && fields[2] == strconv.Itoa(pgid) {
			return true
		}
	}
	return false
}

// docsOutputTail returns the last n bytes of a file.
func docsOutputTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	if len(b) > n {
		b = append([]byte("…"), b[len(b)-n:]...)
	}
	return string(b)
}

// sectionRef is a mention of a section of a guide in code or prose:
// docs/author.md, "The manifest" or README.md ("Set-up"), with the quotes
// escaped or not and a comment's line break inside.
var sectionRef = regexp.MustCompile(`(?:^|[^\w/.])((?:docs/[a-z]+|examples/README|README)(?:\.md)?)(?:,\s*|\s*\(\s*)\\?"([^"\\]+)\\?"`)

// guideMention is a guide named by its path, as `idlepool help` names
// them.
var guideMention = regexp.MustCompile(`\bdocs/[a-z]+\.md\b`)

// TestDocsSectionReferences checks that the program's messages and
// comments, and the guides' prose, name guides and sections of the README
// and the guides that exist: a renamed or moved section leaves none
// behind.
func TestDocsSectionReferences(t *testing.T) {
	t.Parallel()
	comment := regexp.MustCompile(`\n\s*//\s*`)
	checked := 0
	check := func(file, text string) {
		if !strings.Contains(text, "docs/") && !strings.Contains(text, "README") {
			return // names no guide: both patterns need one of these (most Go files; the regexps are slow under -race)
		}
		text = comment.ReplaceAllString(text, " ")
		for _, m := range guideMention.FindAllString(text, -1) {
			if _, err := os.Stat(filepath.Join(docsRepoRoot, m)); err != nil {
				t.Errorf("%s names %s, which does not exist", file, m)
			}
		}
		for _, m := range sectionRef.FindAllStringSubmatch(text, -1) {
			to := m[1]
			if !strings.HasSuffix(to, ".md") {
				to += ".md"
			}
			if _, err := os.Stat(filepath.Join(docsRepoRoot, to)); err != nil {
				t.Errorf("%s names %s, which does not exist", file, m[1])
				continue
			}
			want := githubSlug(strings.ReplaceAll(m[2], "\n", " "))
			found := false
			for a := range readDoc(t, to).anchors {
				found = found || a == want || strings.HasPrefix(a, want+"-")
			}
			if !found {
				t.Errorf("%s names the section %q of %s, which has no such heading", file, m[2], to)
			}
			checked++
		}
	}
	err := filepath.WalkDir(docsRepoRoot, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != docsRepoRoot && (strings.HasPrefix(d.Name(), ".") || d.Name() == "third_party" || d.Name() == "bin") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		check(strings.TrimPrefix(path, docsRepoRoot+"/"), string(b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range docsLinked(t) {
		check(file, readDoc(t, file).prose)
	}
	if checked == 0 {
		t.Error("no reference to a section found: the pattern is broken")
	}
	t.Logf("checked %d references to sections", checked)
}
