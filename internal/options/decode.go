package options

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"reflect"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// maxNodes bounds the nodes one Decode visits, aliases followed: a file of
// a few aliases can otherwise stand for billions of nodes.
const maxNodes = 1 << 20

// Decode applies the YAML document data, read from the file name (for
// messages), onto the struct v points to, strictly: fields the document
// does not set keep their values; an unknown key, a value of the wrong
// type or a second document is an error naming name:line:column and the
// key path as written.
func Decode(name string, data []byte, v any) error {
	var doc yaml.Node
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil // an empty file sets nothing
		}
		if m := yamlSyntax.FindStringSubmatch(err.Error()); m != nil {
			return fmt.Errorf("%s:%s: %s", name, m[1], m[2])
		}
		return fmt.Errorf("%s: %s", name, yamlMessage(err))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return fmt.Errorf("%s:%d: a second YAML document (want one)", name, extra.Line)
	}
	return DecodeNode(name, &doc, v)
}

// DecodeNode is Decode for a node of a file already parsed (for example
// the overrides of one arm of an experiment): positions are the node's
// own, in the file name.
func DecodeNode(name string, n *yaml.Node, v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("options: DecodeNode needs a non-nil pointer, not %T", v)
	}
	d := &decoder{file: name}
	return d.decode(n, rv.Elem(), "")
}

type decoder struct {
	file  string
	nodes int
}

var nodeType = reflect.TypeFor[yaml.Node]()

// An Error is a problem at a place in a YAML file.
type Error struct {
	File         string
	Line, Column int    // 0 when unknown
	Msg          string // the key path as written, then what is wrong
}

func (e *Error) Error() string { return e.At() + ": " + e.Msg }

// At is the error's place: file:line:column.
func (e *Error) At() string {
	if e.Line == 0 {
		return e.File
	}
	return fmt.Sprintf("%s:%d:%d", e.File, e.Line, e.Column)
}

// errorf is an error at node n, for the key path.
func (d *decoder) errorf(n *yaml.Node, path, format string, args ...any) error {
	e := &Error{File: d.file, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	if path != "" {
		e.Msg = path + ": " + e.Msg
	}
	return e
}

func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) error {
	if d.nodes++; d.nodes > maxNodes {
		return d.errorf(n, path, "more than %d YAML nodes (aliases expanding without end?)", maxNodes)
	}
	switch n.Kind {
	case 0:
		return nil // an absent node sets nothing
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil
		}
		return d.decode(n.Content[0], v, path)
	case yaml.AliasNode:
		return d.decode(n.Alias, v, path)
	}
	t := v.Type()
	switch {
	case t == nodeType:
		v.Set(reflect.ValueOf(*n))
		return nil
	case isLeaf(t):
		if n.Kind != yaml.ScalarNode {
			return d.errorf(n, path, "want a single value, not a %s", kindName(n))
		}
		if err := d.checkInteger(n, v, path); err != nil {
			return err
		}
		if err := n.Decode(v.Addr().Interface()); err != nil {
			return d.errorf(n, path, "%s", yamlMessage(err))
		}
		return nil
	case t.Kind() == reflect.Pointer:
		if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
			v.Set(reflect.Zero(t))
			return nil
		}
		if v.IsNil() {
			v.Set(reflect.New(t.Elem()))
		}
		return d.decode(n, v.Elem(), path)
	case t.Kind() == reflect.Struct:
		return d.decodeStruct(n, v, path)
	case t.Kind() == reflect.Slice:
		if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
			v.Set(reflect.Zero(t))
			return nil
		}
		if n.Kind != yaml.SequenceNode {
			return d.errorf(n, path, "want a list, not a %s", kindName(n))
		}
		s := reflect.MakeSlice(t, len(n.Content), len(n.Content))
		for i, item := range n.Content {
			if err := d.decode(item, s.Index(i), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		v.Set(s)
		return nil
	}
	if err := n.Decode(v.Addr().Interface()); err != nil {
		return d.errorf(n, path, "%s", yamlMessage(err))
	}
	return nil
}

// checkInteger refuses, for an integer field, a number with a fraction
// (go-yaml would truncate 1.5 to 1, and wrap -1.5 around to the largest
// uint64), a negative one for an unsigned field, and one beyond the
// field's range (go-yaml would wrap 18446744073709551616 around, or
// saturate it, into a uint64 or an int64): the error names the key, the
// value and the range.
func (d *decoder) checkInteger(n *yaml.Node, v reflect.Value, path string) error {
	tag := n.ShortTag()
	if reflect.PointerTo(v.Type()).Implements(textUnmarshaler) || tag != "!!float" && tag != "!!int" {
		return nil
	}
	lo, hi := new(big.Int), new(big.Int)
	var unsigned bool
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		bits := uint(v.Type().Bits())
		hi.Lsh(big.NewInt(1), bits-1)
		lo.Neg(hi)
		hi.Sub(hi, big.NewInt(1))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		unsigned = true
		hi.Lsh(big.NewInt(1), uint(v.Type().Bits()))
		hi.Sub(hi, big.NewInt(1))
	default:
		return nil
	}
	// The exact value: an integer as written (go-yaml's integer forms:
	// a sign, 0x, 0o, 0b, underscores), else an integral float.
	val, exact := new(big.Int).SetString(strings.TrimPrefix(n.Value, "+"), 0)
	if !exact {
		if tag != "!!float" {
			return nil
		}
		var x float64
		if err := n.Decode(&x); err != nil {
			return d.errorf(n, path, "%s", yamlMessage(err))
		}
		if x != math.Trunc(x) || math.IsInf(x, 0) {
			return d.errorf(n, path, "%s is not an integer", n.Value)
		}
		val, _ = big.NewFloat(x).Int(nil)
	}
	switch {
	case unsigned && val.Sign() < 0:
		return d.errorf(n, path, "%s is not a non-negative integer", n.Value)
	case val.Cmp(lo) < 0 || val.Cmp(hi) > 0:
		return d.errorf(n, path, "%s is out of range (want an integer from %s to %s)", n.Value, lo, hi)
	}
	return nil
}

// normKey is a key in its YAML spelling, whichever was written.
func normKey(k string) string { return strings.ReplaceAll(k, "-", "_") }

func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) error {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return d.errorf(n, path, "want a mapping of keys, not a %s", kindName(n))
	}
	t := v.Type()
	byKey := map[string]int{}
	var known []string
	for i := range t.NumField() {
		if k := keyOf(t.Field(i)); k != "" {
			byKey[k] = i
			known = append(known, k)
		}
	}
	for _, f := range Fields(v.Addr().Interface()) {
		known = append(known, f.Key)
	}
	seen := map[string]int{} // key → line
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, vn := n.Content[i], n.Content[i+1]
		if line, ok := seen[normKey(kn.Value)]; ok {
			return d.errorf(kn, path, "key %q given twice (first on line %d)", kn.Value, line)
		}
		seen[normKey(kn.Value)] = kn.Line
		if kn.Kind == yaml.ScalarNode && kn.Tag == "!!merge" {
			return d.errorf(kn, path, "merge keys (<<) are not supported: write the keys out")
		}
		idx, ok := byKey[normKey(kn.Value)]
		sub := kn.Value
		if path != "" {
			sub = path + "." + kn.Value
		}
		if !ok {
			msg := fmt.Sprintf("unknown key %q", kn.Value)
			if s := Suggest(normKey(kn.Value), known); s != "" {
				msg += fmt.Sprintf(" (did you mean %s?)", s)
			}
			return d.errorf(kn, path, "%s", msg)
		}
		if err := d.decode(vn, v.Field(idx), sub); err != nil {
			return err
		}
	}
	return nil
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.ScalarNode:
		return "value"
	}
	return "node"
}

var yamlSyntax = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

var yamlLine = regexp.MustCompile(`^(yaml: )?(unmarshal errors:\s*)?(line \d+: )?`)

// yamlMessage is a go-yaml error without its prefixes and positions,
// which the decoder gives itself.
func yamlMessage(err error) string {
	msg := strings.TrimSpace(err.Error())
	msg = yamlLine.ReplaceAllString(msg, "")
	return strings.Join(strings.Fields(msg), " ")
}
