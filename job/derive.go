package job

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Expr is a parsed arithmetic expression over named scalars, for the
// manifest's [derive] table. Grammar (precedence climbing, lowest first):
//
//	expr   = term { ("+" | "-") term }
//	term   = unary { ("*" | "/") unary }
//	unary  = ("-" | "+") unary | power
//	power  = atom [ "^" unary ]            (right-associative)
//	atom   = number | name | func "(" expr ")" | "(" expr ")"
//	func   = sqrt | log | exp | abs
//
// A name is a letter or '_' followed by letters, digits, '_' and '.', and
// refers to a merged scalar such as "inside" or "energy.mean". Evaluation is
// plain float64 arithmetic, so the same inputs give the same bits.
type Expr struct {
	src  string
	root node
}

type node interface {
	eval(vars map[string]float64) (float64, error)
	names(into map[string]bool)
}

type num float64
type ref string
type unop struct {
	op byte
	x  node
}
type binop struct {
	op   byte
	l, r node
}
type call struct {
	fn string
	x  node
}

func (n num) eval(map[string]float64) (float64, error) { return float64(n), nil }
func (n num) names(map[string]bool)                    {}
func (r ref) eval(vars map[string]float64) (float64, error) {
	v, ok := vars[string(r)]
	if !ok {
		return 0, fmt.Errorf("%w: unknown name %q", ErrExpr, string(r))
	}
	return v, nil
}
func (r ref) names(into map[string]bool) { into[string(r)] = true }
func (u unop) eval(vars map[string]float64) (float64, error) {
	x, err := u.x.eval(vars)
	if u.op == '-' {
		x = -x
	}
	return x, err
}
func (u unop) names(into map[string]bool) { u.x.names(into) }
func (b binop) eval(vars map[string]float64) (float64, error) {
	l, err := b.l.eval(vars)
	if err != nil {
		return 0, err
	}
	r, err := b.r.eval(vars)
	if err != nil {
		return 0, err
	}
	switch b.op {
	case '+':
		return l + r, nil
	case '-':
		return l - r, nil
	case '*':
		return l * r, nil
	case '/':
		return l / r, nil
	default: // '^'
		return math.Pow(l, r), nil
	}
}
func (b binop) names(into map[string]bool) { b.l.names(into); b.r.names(into) }

var funcs = map[string]func(float64) float64{
	"sqrt": math.Sqrt, "log": math.Log, "exp": math.Exp, "abs": math.Abs,
}

func (c call) eval(vars map[string]float64) (float64, error) {
	x, err := c.x.eval(vars)
	return funcs[c.fn](x), err
}
func (c call) names(into map[string]bool) { c.x.names(into) }

// MaxExprBytes bounds the length of an expression's source, which keeps
// evaluation's recursion over a long chain such as "1+1+...+1" shallow.
const MaxExprBytes = 64 << 10

// ParseExpr parses src (at most MaxExprBytes long). Errors wrap ErrExpr and
// give the byte offset.
func ParseExpr(src string) (*Expr, error) {
	if len(src) > MaxExprBytes {
		return nil, fmt.Errorf("%w: %d bytes long, more than %d", ErrExpr, len(src), MaxExprBytes)
	}
	p := &parser{src: src}
	n, err := p.expr()
	if err != nil {
		return nil, err
	}
	p.skip()
	if p.pos < len(p.src) {
		return nil, p.errorf("unexpected %q", p.src[p.pos:])
	}
	return &Expr{src: src, root: n}, nil
}

// Eval evaluates the expression with the given scalars. A name missing from
// vars is an error wrapping ErrExpr; division by zero gives ±Inf or NaN as
// IEEE 754 says.
func (e *Expr) Eval(vars map[string]float64) (float64, error) { return e.root.eval(vars) }

// Names returns the scalar names the expression uses, sorted.
func (e *Expr) Names() []string {
	set := map[string]bool{}
	e.root.names(set)
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// String returns the source text.
func (e *Expr) String() string { return e.src }

type parser struct {
	src   string
	pos   int
	depth int
}

func (p *parser) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: at offset %d of %q: %s", ErrExpr, p.pos, p.src, fmt.Sprintf(format, args...))
}

func (p *parser) skip() {
	for p.pos < len(p.src) && (p.src[p.pos] == ' ' || p.src[p.pos] == '\t') {
		p.pos++
	}
}

func (p *parser) peek() byte {
	p.skip()
	if p.pos < len(p.src) {
		return p.src[p.pos]
	}
	return 0
}

func (p *parser) expr() (node, error) {
	if p.depth++; p.depth > 200 {
		return nil, p.errorf("nested too deeply")
	}
	defer func() { p.depth-- }()
	l, err := p.term()
	for err == nil {
		op := p.peek()
		if op != '+' && op != '-' {
			return l, nil
		}
		p.pos++
		var r node
		r, err = p.term()
		l = binop{op, l, r}
	}
	return nil, err
}

func (p *parser) term() (node, error) {
	l, err := p.unary()
	for err == nil {
		op := p.peek()
		if op != '*' && op != '/' {
			return l, nil
		}
		p.pos++
		var r node
		r, err = p.unary()
		l = binop{op, l, r}
	}
	return nil, err
}

func (p *parser) unary() (node, error) {
	if op := p.peek(); op == '-' || op == '+' {
		p.pos++
		if p.depth++; p.depth > 200 {
			return nil, p.errorf("nested too deeply")
		}
		defer func() { p.depth-- }()
		x, err := p.unary()
		if err != nil {
			return nil, err
		}
		return unop{op, x}, nil
	}
	return p.power()
}

func (p *parser) power() (node, error) {
	base, err := p.atom()
	if err != nil {
		return nil, err
	}
	if p.peek() == '^' {
		p.pos++
		if p.depth++; p.depth > 200 {
			return nil, p.errorf("nested too deeply")
		}
		defer func() { p.depth-- }()
		exp, err := p.unary()
		if err != nil {
			return nil, err
		}
		return binop{'^', base, exp}, nil
	}
	return base, nil
}

func isNameStart(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isNameChar(c byte) bool  { return isNameStart(c) || c >= '0' && c <= '9' || c == '.' }

func (p *parser) atom() (node, error) {
	c := p.peek()
	switch {
	case c == '(':
		p.pos++
		n, err := p.expr()
		if err != nil {
			return nil, err
		}
		if p.peek() != ')' {
			return nil, p.errorf("want ')'")
		}
		p.pos++
		return n, nil
	case c >= '0' && c <= '9' || c == '.':
		start := p.pos
		for p.pos < len(p.src) && strings.IndexByte("0123456789.eE", p.src[p.pos]) >= 0 {
			if (p.src[p.pos] == 'e' || p.src[p.pos] == 'E') && p.pos+1 < len(p.src) && (p.src[p.pos+1] == '-' || p.src[p.pos+1] == '+') {
				p.pos++
			}
			p.pos++
		}
		text := p.src[start:p.pos]
		v, err := strconv.ParseFloat(text, 64)
		if err != nil {
			p.pos = start
			return nil, p.errorf("bad number %q", text)
		}
		return num(v), nil
	case isNameStart(c):
		start := p.pos
		for p.pos < len(p.src) && isNameChar(p.src[p.pos]) {
			p.pos++
		}
		name := p.src[start:p.pos]
		if _, ok := funcs[name]; ok && p.peek() == '(' {
			p.pos++
			x, err := p.expr()
			if err != nil {
				return nil, err
			}
			if p.peek() != ')' {
				return nil, p.errorf("want ')' after the argument of %s", name)
			}
			p.pos++
			return call{name, x}, nil
		}
		return ref(name), nil
	case c == 0:
		return nil, p.errorf("unexpected end of expression")
	default:
		_, size := utf8.DecodeRuneInString(p.src[p.pos:])
		return nil, p.errorf("unexpected %q", p.src[p.pos:p.pos+size])
	}
}
