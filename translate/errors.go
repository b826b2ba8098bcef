// SPDX-License-Identifier: Apache-2.0

package translate

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// v2 error codes, as numbered by etcd's v2error package.
const (
	EcodeKeyNotFound        = 100
	EcodeTestFailed         = 101
	EcodeNotFile            = 102
	EcodeNotDir             = 104
	EcodeNodeExist          = 105
	EcodeRootROnly          = 107
	EcodeDirNotEmpty        = 108
	EcodeUnauthorized       = 110
	EcodePrevValueRequired  = 201
	EcodeTTLNaN             = 202
	EcodeIndexNaN           = 203
	EcodeInvalidField       = 209
	EcodeInvalidForm        = 210
	EcodeRefreshValue       = 211
	EcodeRefreshTTLRequired = 212
	EcodeRaftInternal       = 300
	EcodeLeaderElect        = 301
	EcodeEventIndexCleared  = 401
)

var errorMessages = map[int]string{
	EcodeKeyNotFound:        "Key not found",
	EcodeTestFailed:         "Compare failed",
	EcodeNotFile:            "Not a file",
	103:                     "Reached the max number of peers in the cluster",
	EcodeNotDir:             "Not a directory",
	EcodeNodeExist:          "Key already exists",
	106:                     "The prefix of given key is a keyword in etcd",
	EcodeRootROnly:          "Root is read only",
	EcodeDirNotEmpty:        "Directory not empty",
	109:                     "Peer address has existed",
	EcodeUnauthorized:       "The request requires user authentication",
	200:                     "Value is Required in POST form",
	EcodePrevValueRequired:  "PrevValue is Required in POST form",
	EcodeTTLNaN:             "The given TTL in POST form is not a number",
	EcodeIndexNaN:           "The given index in POST form is not a number",
	204:                     "Value or TTL is required in POST form",
	205:                     "The given timeout in POST form is not a number",
	206:                     "Name is required in POST form",
	207:                     "Index or value is required",
	208:                     "Index and value cannot both be specified",
	EcodeInvalidField:       "Invalid field",
	EcodeInvalidForm:        "Invalid POST form",
	EcodeRefreshValue:       "Value provided on refresh",
	EcodeRefreshTTLRequired: "A TTL must be provided on refresh",
	EcodeRaftInternal:       "Raft Internal Error",
	EcodeLeaderElect:        "During Leader Election",
	400:                     "watcher is cleared due to etcd recovery",
	EcodeEventIndexCleared:  "The event in requested index is outdated and cleared",
}

// errorStatus holds the codes whose HTTP status is not 400, as v2error does.
var errorStatus = map[int]int{
	EcodeKeyNotFound:  http.StatusNotFound,
	EcodeNotFile:      http.StatusForbidden,
	EcodeDirNotEmpty:  http.StatusForbidden,
	EcodeUnauthorized: http.StatusUnauthorized,
	EcodeTestFailed:   http.StatusPreconditionFailed,
	EcodeNodeExist:    http.StatusPreconditionFailed,
	EcodeRaftInternal: http.StatusInternalServerError,
	EcodeLeaderElect:  http.StatusInternalServerError,
}

// Error is a v2 API error; its JSON shape and field order are v2's.
type Error struct {
	Code    int    `json:"errorCode"`
	Message string `json:"message"`
	Cause   string `json:"cause,omitempty"`
	Index   uint64 `json:"index"`
}

// NewError returns the v2 error for code with v2's message.
func NewError(code int, cause string, index uint64) *Error {
	return &Error{Code: code, Message: errorMessages[code], Cause: cause, Index: index}
}

func (e *Error) Error() string {
	return fmt.Sprintf("%v: %v (%v) [%v]", e.Code, e.Message, e.Cause, e.Index)
}

// StatusCode is the HTTP status v2 sends with this error.
func (e *Error) StatusCode() int {
	if s, ok := errorStatus[e.Code]; ok {
		return s
	}
	return http.StatusBadRequest
}

// WriteResponse answers with e as v2 does: its index in X-Etcd-Index, its
// status and its JSON body. It returns the status.
func (e *Error) WriteResponse(w http.ResponseWriter) int {
	h := w.Header()
	h.Set("X-Etcd-Index", strconv.FormatUint(e.Index, 10))
	h.Set("Content-Type", "application/json")
	code := e.StatusCode()
	w.WriteHeader(code)
	_, _ = w.Write(e.JSON())
	return code
}

// JSON is the error body v2 writes, with its trailing newline.
func (e *Error) JSON() []byte {
	b, _ := json.Marshal(e) // cannot fail: plain fields
	return append(b, '\n')
}
