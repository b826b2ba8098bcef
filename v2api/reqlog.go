// SPDX-License-Identifier: Apache-2.0

package v2api

import (
	"net/http"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/v2bridge/v2bridge/translate"
)

// RequestLog wraps h to log every request at debug level: method, path,
// status, duration and bytes; for a watch (translate.IsWatchRequest) a line when it starts
// and one when it ends, with why it ended. Query strings and bodies are never
// logged: they carry values (value=, prevValue=). When lg does not log debug
// it returns h itself, so it costs nothing in production.
func RequestLog(h http.Handler, lg *zap.Logger) http.Handler {
	if !lg.Core().Enabled(zapcore.DebugLevel) {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rw := &loggingWriter{ResponseWriter: w}
		q := r.URL.Query()
		watch := translate.IsWatchRequest(r)
		fields := []zap.Field{zap.String("method", r.Method), zap.String("path", r.URL.Path), zap.String("remote", r.RemoteAddr)}
		if watch {
			lg.Debug("watch started", append(fields, zap.String("waitIndex", q.Get("waitIndex")),
				zap.Bool("recursive", translate.FlagSet(q, "recursive")), zap.Bool("stream", translate.FlagSet(q, "stream")))...)
			// A watch that detaches ends after the handler returns (and r's
			// context with it: the reason comes from the detached side).
			rw.onDetachedEnd = func(bytes int, gone bool) {
				lg.Debug("watch ended", append(fields, zap.Int("status", http.StatusOK),
					zap.Duration("duration", time.Since(start)), zap.Int("bytes", bytes), zap.Bool("detached", true),
					zap.String("reason", endReason(gone, http.StatusOK, int64(bytes))))...)
			}
		}
		h.ServeHTTP(rw, r)
		if rw.detached {
			return
		}
		status := rw.status
		if status == 0 {
			status = http.StatusOK
		}
		fields = append(fields, zap.Int("status", status), zap.Duration("duration", time.Since(start)), zap.Int64("bytes", rw.bytes))
		if watch {
			lg.Debug("watch ended", append(fields, zap.String("reason", watchEndReason(r, status, rw.bytes)))...)
			return
		}
		lg.Debug("request", fields...)
	})
}

// watchEndReason tells from the outside why a watch answer ended: the v2
// handler ends a watch with an empty 200 when the backend is lost or the
// bridge shuts down, which clients answer by re-issuing it.
func watchEndReason(r *http.Request, status int, bytes int64) string {
	return endReason(r.Context().Err() != nil, status, bytes)
}

func endReason(gone bool, status int, bytes int64) string {
	switch {
	case gone:
		return "client went away"
	case status != http.StatusOK:
		return "refused (see status)"
	case bytes == 0:
		return "ended without an event (backend lost or bridge shutting down)"
	default:
		return "event delivered"
	}
}

// loggingWriter records the status and body size, and keeps the Flusher the
// watch handler needs to send headers at once.
type loggingWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
	// onDetachedEnd logs the end of a watch that detached; detached says
	// it did, so that its end is not logged when the handler returns.
	onDetachedEnd func(bytes int, gone bool)
	detached      bool
}

// parkObserver tells the request log in w's chain, if any, that its watch
// leaves the handler (detach.Park), and returns what to call when it ends.
func parkObserver(w http.ResponseWriter) func(bytes int, gone bool) {
	for {
		if lw, ok := w.(*loggingWriter); ok {
			return lw.watchDetached()
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return nil
		}
		w = u.Unwrap()
	}
}

// watchDetached is told by the watch handler that the watch left it.
func (w *loggingWriter) watchDetached() func(bytes int, gone bool) {
	if w.onDetachedEnd == nil {
		return nil
	}
	w.detached = true
	return w.onDetachedEnd
}

func (w *loggingWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *loggingWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (w *loggingWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection underneath.
func (w *loggingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
