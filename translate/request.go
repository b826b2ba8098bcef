// SPDX-License-Identifier: Apache-2.0

package translate

import (
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Limits the bridge puts on keys, so a request is refused with a clear v2 error
// rather than failing deep inside a v3 transaction.
const (
	MaxKeyBytes = 4096
	MaxKeyDepth = 48 // a write reads two keys per ancestor in one Txn (etcd's default cap is 128 ops)
)

// Request is a parsed /v2/keys request.
type Request struct {
	Method           string
	Path             string // cleaned v2 path, "/" for the root
	Value            string
	Dir              bool
	Recursive        bool
	Sorted           bool
	Quorum           bool
	Wait             bool
	Stream           bool
	NoValueOnSuccess bool
	PrevValue        string // "" means absent (an empty one is refused)
	PrevIndex        uint64 // 0 means absent
	WaitIndex        uint64
	TTL              *uint64 // nil: permanent
	PrevExist        *bool
	Refresh          bool
}

// HasCompare reports whether the request carries a CAS/CAD precondition.
func (r *Request) HasCompare() bool { return r.PrevValue != "" || r.PrevIndex != 0 }

// IsWatch reports whether v2 would serve the request as a watch: quorum=true
// turns GET into QGET before the wait flag is looked at.
func (r *Request) IsWatch() bool { return r.Method == "GET" && r.Wait && !r.Quorum }

// CleanPath maps the part of the URL path after /v2/keys to a v2 key the way
// v2 does (path.Join: cleaned, no trailing slash, "" is the root), and refuses
// what cannot be a key in the bridge's namespace.
func CleanPath(raw string) (string, *Error) {
	if !utf8.ValidString(raw) {
		return "", NewError(EcodeInvalidField, "key is not valid UTF-8", 0)
	}
	for _, c := range raw {
		if c < 0x20 || c == 0x7f {
			return "", NewError(EcodeInvalidField, "key contains a control character", 0)
		}
	}
	p := path.Join("/", raw)
	if len(p) > MaxKeyBytes {
		return "", NewError(EcodeInvalidField, "key is longer than "+strconv.Itoa(MaxKeyBytes)+" bytes", 0)
	}
	if strings.Count(p, "/") > MaxKeyDepth {
		return "", NewError(EcodeInvalidField, "key is deeper than "+strconv.Itoa(MaxKeyDepth)+" levels", 0)
	}
	return p, nil
}

// ParseRequest applies v2's parseKeyRequest rules, in v2's order, to a
// request whose form (body values first, then query) is already merged.
func ParseRequest(method, rawPath string, form url.Values) (*Request, *Error) {
	p, perr := CleanPath(rawPath)
	if perr != nil {
		return nil, perr
	}
	r := &Request{Method: method, Path: p}
	var err error
	if r.PrevIndex, err = getUint64(form, "prevIndex"); err != nil {
		return nil, NewError(EcodeIndexNaN, `invalid value for "prevIndex"`, 0)
	}
	if r.WaitIndex, err = getUint64(form, "waitIndex"); err != nil {
		return nil, NewError(EcodeIndexNaN, `invalid value for "waitIndex"`, 0)
	}
	for _, b := range []struct {
		name string
		dst  *bool
	}{
		{"recursive", &r.Recursive}, {"sorted", &r.Sorted}, {"wait", &r.Wait},
		{"dir", &r.Dir}, {"quorum", &r.Quorum}, {"stream", &r.Stream},
	} {
		if *b.dst, err = getBool(form, b.name); err != nil {
			return nil, NewError(EcodeInvalidField, `invalid value for "`+b.name+`"`, 0)
		}
	}
	if r.Wait && method != "GET" {
		return nil, NewError(EcodeInvalidField, `"wait" can only be used with GET requests`, 0)
	}
	r.PrevValue = form.Get("prevValue")
	if _, ok := form["prevValue"]; ok && r.PrevValue == "" {
		return nil, NewError(EcodePrevValueRequired, `"prevValue" cannot be empty`, 0)
	}
	if r.NoValueOnSuccess, err = getBool(form, "noValueOnSuccess"); err != nil {
		return nil, NewError(EcodeInvalidField, `invalid value for "noValueOnSuccess"`, 0)
	}
	if form.Get("ttl") != "" {
		ttl, err := getUint64(form, "ttl")
		if err != nil {
			return nil, NewError(EcodeTTLNaN, `invalid value for "ttl"`, 0)
		}
		r.TTL = &ttl
	}
	if _, ok := form["prevExist"]; ok {
		pe, err := getBool(form, "prevExist")
		if err != nil {
			return nil, NewError(EcodeInvalidField, "invalid value for prevExist", 0)
		}
		r.PrevExist = &pe
	}
	if _, ok := form["refresh"]; ok {
		if r.Refresh, err = getBool(form, "refresh"); err != nil {
			return nil, NewError(EcodeInvalidField, "invalid value for refresh", 0)
		}
		if r.Refresh {
			if _, ok := form["value"]; ok && form.Get("value") != "" {
				return nil, NewError(EcodeRefreshValue, "A value was provided on a refresh", 0)
			}
			if r.TTL == nil {
				return nil, NewError(EcodeRefreshTTLRequired, "No TTL value set", 0)
			}
		}
	}
	r.Value = form.Get("value")
	if (method == "PUT" || method == "POST") && !utf8.ValidString(r.Value) {
		// v2's JSON shows such bytes changed (as U+FFFD): a client could
		// never read back, or compare against, what it wrote.
		return nil, NewError(EcodeInvalidField, "value is not valid UTF-8", 0)
	}
	return r, nil
}

func getUint64(form url.Values, key string) (uint64, error) {
	if vals, ok := form[key]; ok && len(vals) > 0 {
		return strconv.ParseUint(vals[0], 10, 64)
	}
	return 0, nil
}

// IsWatchRequest reports whether r is a v2 watch, as ParseRequest and
// Request.IsWatch decide it before r is parsed: a GET of /v2/keys or a key
// below it whose wait flag reads true and whose quorum flag does not (v2
// serves wait=true&quorum=true as a plain read).
func IsWatchRequest(r *http.Request) bool {
	p := r.URL.Path
	if r.Method != http.MethodGet || p != "/v2/keys" && !strings.HasPrefix(p, "/v2/keys/") {
		return false
	}
	q := r.URL.Query()
	return FlagSet(q, "wait") && !FlagSet(q, "quorum")
}

// FlagSet reports whether form sets the flag key true, as ParseRequest
// reads a flag (a value it cannot read sets nothing).
func FlagSet(form url.Values, key string) bool {
	b, err := getBool(form, key)
	return err == nil && b
}

func getBool(form url.Values, key string) (bool, error) {
	if vals, ok := form[key]; ok && len(vals) > 0 {
		return strconv.ParseBool(vals[0])
	}
	return false, nil
}
