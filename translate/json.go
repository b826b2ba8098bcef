// SPDX-License-Identifier: Apache-2.0

package translate

import (
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"
)

// AppendJSON appends the event's JSON, byte for byte what json.Marshal
// writes for it, without reflection: every v2 answer is one of these. It
// fails where json.Marshal fails (an expiration time JSON cannot show).
func (e *Event) AppendJSON(b []byte) ([]byte, error) {
	b = append(b, `{"action":`...)
	b = appendJSONString(b, e.Action)
	var err error
	if e.Node != nil {
		b = append(b, `,"node":`...)
		if b, err = e.Node.appendJSON(b); err != nil {
			return nil, err
		}
	}
	if e.PrevNode != nil {
		b = append(b, `,"prevNode":`...)
		if b, err = e.PrevNode.appendJSON(b); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// appendJSON appends the record's JSON as json.Marshal writes it.
func (j *Journal) appendJSON(b []byte) ([]byte, error) {
	b = append(b, `{"a":`...)
	b = appendJSONString(b, j.Action)
	var err error
	if j.Node != nil {
		b = append(b, `,"n":`...)
		if b, err = j.Node.appendJSON(b); err != nil {
			return nil, err
		}
	}
	if j.PrevNode != nil {
		b = append(b, `,"p":`...)
		if b, err = j.PrevNode.appendJSON(b); err != nil {
			return nil, err
		}
	}
	if j.Refresh {
		b = append(b, `,"r":true`...)
	}
	if j.Sweep {
		b = append(b, `,"s":true`...)
	}
	if j.DataPrefix != "" {
		b = append(b, `,"dp":`...)
		b = appendJSONString(b, j.DataPrefix)
	}
	if j.Place != 0 {
		b = append(b, `,"i":`...)
		b = strconv.AppendInt(b, int64(j.Place), 10)
	}
	return append(b, '}'), nil
}

// appendJSON follows Node's field order and omitempty rules.
func (n *Node) appendJSON(b []byte) ([]byte, error) {
	b = append(b, '{')
	first := true
	field := func(name string) {
		if !first {
			b = append(b, ',')
		}
		first = false
		b = append(b, '"')
		b = append(b, name...)
		b = append(b, `":`...)
	}
	if n.Key != "" {
		field("key")
		b = appendJSONString(b, n.Key)
	}
	if n.Value != nil {
		field("value")
		b = appendJSONString(b, *n.Value)
	}
	if n.Dir {
		field("dir")
		b = append(b, "true"...)
	}
	if n.Expiration != nil {
		t, err := n.Expiration.MarshalJSON()
		if err != nil {
			return nil, err
		}
		field("expiration")
		b = append(b, t...)
	}
	if n.TTL != 0 {
		field("ttl")
		b = strconv.AppendInt(b, n.TTL, 10)
	}
	if len(n.Nodes) > 0 {
		field("nodes")
		b = append(b, '[')
		for i, c := range n.Nodes {
			if i > 0 {
				b = append(b, ',')
			}
			if c == nil {
				b = append(b, "null"...)
				continue
			}
			var err error
			if b, err = c.appendJSON(b); err != nil {
				return nil, err
			}
		}
		b = append(b, ']')
	}
	if n.ModifiedIndex != 0 {
		field("modifiedIndex")
		b = strconv.AppendUint(b, n.ModifiedIndex, 10)
	}
	if n.CreatedIndex != 0 {
		field("createdIndex")
		b = strconv.AppendUint(b, n.CreatedIndex, 10)
	}
	return append(b, '}'), nil
}

const hexDigits = "0123456789abcdef"

// appendJSONString quotes s as encoding/json does (with its default HTML
// escaping): <, > and & as \u003c, \u003e, \u0026; control characters;
// invalid UTF-8 as \ufffd; U+2028 and U+2029 escaped.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// decodeJournal decodes a journal record as json.Unmarshal does. A record
// as bridges write it (json.Marshal's form: no spaces, fields in order,
// strings without escapes) is read directly; anything else goes to
// json.Unmarshal. Every revision of a bridge's write that keeps the
// record is decoded by every bridge's shared watch.
func decodeJournal(data []byte, j *Journal) error {
	if fastJournal(data, j) {
		return nil
	}
	*j = Journal{}
	return json.Unmarshal(data, j)
}

// jsonScan reads json.Marshal's compact form of the bridge's own types.
type jsonScan struct {
	b []byte
	i int
}

func (s *jsonScan) lit(l string) bool {
	if len(s.b)-s.i >= len(l) && string(s.b[s.i:s.i+len(l)]) == l {
		s.i += len(l)
		return true
	}
	return false
}

// str reads a string with no escapes, no control characters and valid
// UTF-8 (the ones json.Unmarshal returns as they are).
func (s *jsonScan) str() (string, bool) {
	if !s.lit(`"`) {
		return "", false
	}
	start := s.i
	for ; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; {
		case c == '"':
			v := s.b[start:s.i]
			s.i++
			if !utf8.Valid(v) {
				return "", false
			}
			return string(v), true
		case c == '\\' || c < 0x20:
			return "", false
		}
	}
	return "", false
}

// num reads the digits of an integer (with a sign if signed).
func (s *jsonScan) num(signed bool) (string, bool) {
	start := s.i
	if signed && s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	d := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	if s.i == d || (s.b[d] == '0' && s.i-d > 1) {
		return "", false
	}
	return string(s.b[start:s.i]), true
}

// node reads a Node without children.
func (s *jsonScan) node() (*Node, bool) {
	if !s.lit("{") {
		return nil, false
	}
	n := &Node{}
	if s.lit("}") {
		return n, true
	}
	sep := ""
	ok := true
	if s.lit(sep + `"key":`) {
		n.Key, ok = s.str()
		sep = ","
	}
	if ok && s.lit(sep+`"value":`) {
		var v string
		v, ok = s.str()
		n.Value, sep = &v, ","
	}
	if ok && s.lit(sep+`"dir":true`) {
		n.Dir, sep = true, ","
	}
	if ok && s.lit(sep+`"expiration":`) {
		start := s.i
		if _, ok = s.str(); ok {
			t := new(time.Time)
			ok = t.UnmarshalJSON(s.b[start:s.i]) == nil
			n.Expiration = t
		}
		sep = ","
	}
	if ok && s.lit(sep+`"ttl":`) {
		var v string
		if v, ok = s.num(true); ok {
			var err error
			n.TTL, err = strconv.ParseInt(v, 10, 64)
			ok = err == nil
		}
		sep = ","
	}
	if ok && s.lit(sep+`"modifiedIndex":`) {
		var v string
		if v, ok = s.num(false); ok {
			var err error
			n.ModifiedIndex, err = strconv.ParseUint(v, 10, 64)
			ok = err == nil
		}
		sep = ","
	}
	if ok && s.lit(sep+`"createdIndex":`) {
		var v string
		if v, ok = s.num(false); ok {
			var err error
			n.CreatedIndex, err = strconv.ParseUint(v, 10, 64)
			ok = err == nil
		}
	}
	return n, ok && s.lit("}")
}

// fastJournal decodes data into j if it is in json.Marshal's form, and
// reports whether it did (j is then what json.Unmarshal would make).
func fastJournal(data []byte, j *Journal) bool {
	s := &jsonScan{b: data}
	var r Journal
	var ok bool
	if !s.lit(`{"a":`) {
		return false
	}
	if r.Action, ok = s.str(); !ok {
		return false
	}
	if s.lit(`,"n":`) {
		if r.Node, ok = s.node(); !ok {
			return false
		}
	}
	if s.lit(`,"p":`) {
		if r.PrevNode, ok = s.node(); !ok {
			return false
		}
	}
	r.Refresh = s.lit(`,"r":true`)
	r.Sweep = s.lit(`,"s":true`)
	if s.lit(`,"dp":`) {
		if r.DataPrefix, ok = s.str(); !ok {
			return false
		}
	}
	if s.lit(`,"i":`) {
		n, ok := s.num(false)
		if !ok {
			return false
		}
		if r.Place, ok = atoiOK(n); !ok {
			return false
		}
	}
	if !s.lit("}") || s.i != len(s.b) {
		return false
	}
	*j = r
	return true
}

// atoiOK parses a place in a transaction.
func atoiOK(n string) (int, bool) {
	i, err := strconv.Atoi(n)
	return i, err == nil
}
