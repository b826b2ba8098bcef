// SPDX-License-Identifier: Apache-2.0

package translate

import (
	"strconv"
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
