// SPDX-License-Identifier: Apache-2.0

package v3backend

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/v2bridge/v2bridge/translate"
)

// mirroredBackend is a Backend whose mirror, valid at revision 200, holds
// the directories /bench and /bench/get with 100 files k0000…k0099 of 64
// bytes (the keys of make bench's get-64), and no member: every GET of a
// key it holds is answered from the mirror.
func mirroredBackend(t testing.TB) *Backend {
	l, err := translate.NewLayout("", "_v2bridge/")
	if err != nil {
		t.Fatal(err)
	}
	m := newMirror(l)
	m.kvs, m.rev, m.valid = newKVTree(), 200, true
	m.kvs.ReplaceOrInsert(&translate.KV{Key: l.MarkerKey("/bench"), Value: []byte("{}"), CreateRevision: 2, ModRevision: 2})
	m.kvs.ReplaceOrInsert(&translate.KV{Key: l.MarkerKey("/bench/get"), Value: []byte("{}"), CreateRevision: 3, ModRevision: 3})
	for i := range 100 {
		m.kvs.ReplaceOrInsert(&translate.KV{Key: l.DataKey(fmt.Sprintf("/bench/get/k%04d", i)), Value: []byte(value64),
			CreateRevision: int64(10 + i), ModRevision: int64(10 + i)})
	}
	return &Backend{layout: l, leases: newLeaseCache(), lg: zap.NewNop(), metrics: newMetrics(prometheus.NewRegistry()), mirror: m}
}

const value64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// A GET reads the TTL directory records around its path only while the
// mirror holds one: they cost more than the rest of the read, and most key
// spaces have none.
func TestMirrorReadsTTLDirRecordsOnlyWhileItHoldsOne(t *testing.T) {
	b := mirroredBackend(t)
	m, l := b.mirror, b.layout
	reads := append(l.GetReads("/bench/get/k0007"), l.AncestorMarkerReads("/bench/get/k0007")...)
	built := 0
	ttlDirs := func() []translate.Read { built++; return l.TTLDirReads("/bench/get/k0007") }

	lists, rev, ok := m.readWithTTLDirs(reads, ttlDirs)
	if !ok || rev != 200 || len(lists) != len(reads) || built != 0 {
		t.Fatalf("no TTL directory record: got %d lists of %d reads at %d (ok %v), the TTL reads built %d times; want %d lists, none built",
			len(lists), len(reads), rev, ok, built, len(reads))
	}

	// A TTL directory elsewhere: the reads are made, and find nothing.
	rec := &translate.KV{Key: l.TTLDirKey("/other"), Value: []byte("x"), CreateRevision: 150, ModRevision: 150}
	m.kvs.ReplaceOrInsert(rec)
	lists, rev, ok = m.readWithTTLDirs(reads, ttlDirs)
	want := len(reads) + len(l.TTLDirReads("/bench/get/k0007"))
	if !ok || rev != 200 || len(lists) != want || built != 1 {
		t.Fatalf("a TTL directory record: got %d lists at %d (ok %v), the TTL reads built %d times; want %d lists, built once",
			len(lists), rev, ok, built, want)
	}
	for i, kvs := range lists[len(reads):] {
		if len(kvs) != 0 {
			t.Errorf("TTL read %d found %v, want nothing", i, kvs)
		}
	}

	// The record of /bench/get itself is found.
	own := &translate.KV{Key: l.TTLDirKey("/bench/get"), Value: []byte("x"), CreateRevision: 160, ModRevision: 160}
	m.kvs.ReplaceOrInsert(own)
	lists, _, _ = m.readWithTTLDirs(reads, ttlDirs)
	var found []*translate.KV
	for _, kvs := range lists[len(reads):] {
		found = append(found, kvs...)
	}
	if !reflect.DeepEqual(found, []*translate.KV{own}) {
		t.Fatalf("TTL reads found %v, want only the record of /bench/get", found)
	}
}

// A GET from the mirror answers the file; once /bench/get is a TTL
// directory whose lease took its marker (its record left for the sweep),
// the same GET finds nothing below it.
func TestGetFromMirrorHidesAnExpiredTTLDirectorysRemains(t *testing.T) {
	b := mirroredBackend(t)
	ctx := context.Background()
	ev, err := b.get(ctx, nil, &translate.Request{Path: "/bench/get/k0007"})
	if err != nil {
		t.Fatal(err)
	}
	v := value64
	want := &translate.Event{Action: translate.ActionGet, EtcdIndex: translate.Index(200), Node: &translate.Node{
		Key: "/bench/get/k0007", Value: &v, ModifiedIndex: translate.Index(17), CreatedIndex: translate.Index(17)}}
	if !reflect.DeepEqual(ev, want) {
		t.Fatalf("GET = %+v %+v, want %+v %+v", ev, ev.Node, want, want.Node)
	}

	l := b.layout
	b.mirror.kvs.Delete(&translate.KV{Key: l.MarkerKey("/bench/get")})
	b.mirror.kvs.ReplaceOrInsert(&translate.KV{Key: l.TTLDirKey("/bench/get"), Value: []byte("x"), CreateRevision: 3, ModRevision: 3})
	ev, err = b.get(ctx, nil, &translate.Request{Path: "/bench/get/k0007"})
	var e *translate.Error
	if !errors.As(err, &e) || ev != nil {
		t.Fatalf("GET below the expired directory = %+v, %v; want a v2 error", ev, err)
	}
	wantErr := &translate.Error{Code: translate.EcodeKeyNotFound, Message: "Key not found", Cause: "/bench/get", Index: translate.Index(200)}
	if !reflect.DeepEqual(e, wantErr) {
		t.Fatalf("error = %+v, want %+v", e, wantErr)
	}
}

// A GET from the mirror of a key space without TTL directories allocates
// as it did before they were read (28 times at this writing; 43 while every
// GET built and read the TTL directory records around its path).
func TestGetFromMirrorAllocations(t *testing.T) {
	b := mirroredBackend(t)
	ctx := context.Background()
	r := &translate.Request{Path: "/bench/get/k0007"}
	n := testing.AllocsPerRun(200, func() {
		if _, err := b.get(ctx, nil, r); err != nil {
			t.Fatal(err)
		}
	})
	if n > 32 {
		t.Fatalf("a GET from the mirror allocates %.0f times, want at most 32", n)
	}
}

// BenchmarkGetFromMirror is the backend's share of make bench's get-64: a
// GET answered from the mirror, without the HTTP handler around it.
func BenchmarkGetFromMirror(b *testing.B) {
	be := mirroredBackend(b)
	ctx := context.Background()
	paths := make([]string, 100)
	for i := range paths {
		paths[i] = fmt.Sprintf("/bench/get/k%04d", i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := be.get(ctx, nil, &translate.Request{Path: paths[i%100]}); err != nil {
			b.Fatal(err)
		}
	}
}
