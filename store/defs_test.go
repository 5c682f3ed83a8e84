package store

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func openT(t *testing.T, dir string) *Defs {
	t.Helper()
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func dump(t *testing.T, d *Defs, kind string) map[string]string {
	t.Helper()
	m := map[string]string{}
	if err := d.ForEach(kind, func(k, v []byte) error {
		m[string(k)] = string(v)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestDefsReopenSeesData(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data") // created by Open
	d := openT(t, dir)
	for _, k := range Kinds {
		if err := d.Put(k, "/\x00a", []byte("A-"+k)); err != nil {
			t.Fatal(err)
		}
		if err := d.Put(k, "/\x00b", []byte("B-"+k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Put(KindQueues, "/\x00a", []byte("A2")); err != nil { // replace
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, DefsFile)); err != nil {
		t.Fatal(err)
	}
	d = openT(t, dir)
	defer d.Close()
	for _, k := range Kinds {
		got := dump(t, d, k)
		wantA := "A-" + k
		if k == KindQueues {
			wantA = "A2"
		}
		if len(got) != 2 || got["/\x00a"] != wantA || got["/\x00b"] != "B-"+k {
			t.Errorf("%s after reopen: %q", k, got)
		}
	}
}

func TestDefsDeleteStaysDeleted(t *testing.T) {
	dir := t.TempDir()
	d := openT(t, dir)
	for i := range 10 {
		if err := d.Put(KindExchanges, fmt.Sprintf("v\x00x%d", i), []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Delete(KindExchanges, "v\x00x3"); err != nil {
		t.Fatal(err)
	}
	if err := d.Delete(KindExchanges, "never-there"); err != nil {
		t.Fatalf("deleting a missing key: %v", err)
	}
	d.Close()
	for round := range 2 {
		d = openT(t, dir)
		got := dump(t, d, KindExchanges)
		if _, ok := got["v\x00x3"]; ok || len(got) != 9 {
			t.Fatalf("round %d: %q", round, got)
		}
		d.Close()
	}
}

func TestDefsForEachOrderAndStop(t *testing.T) {
	d := openT(t, t.TempDir())
	defer d.Close()
	for _, k := range []string{"c", "a", "b"} {
		if err := d.Put(KindUsers, k, nil); err != nil {
			t.Fatal(err)
		}
	}
	var keys []string
	stop := fmt.Errorf("stop")
	err := d.ForEach(KindUsers, func(k, _ []byte) error {
		keys = append(keys, string(k))
		if len(keys) == 2 {
			return stop
		}
		return nil
	})
	if err != stop || fmt.Sprint(keys) != "[a b]" {
		t.Fatalf("err %v keys %v", err, keys)
	}
}

func TestDefsUnknownKind(t *testing.T) {
	d := openT(t, t.TempDir())
	defer d.Close()
	if err := d.Put("nope", "k", nil); err == nil {
		t.Error("Put to an unknown kind succeeded")
	}
	if err := d.Delete("nope", "k"); err == nil {
		t.Error("Delete in an unknown kind succeeded")
	}
	if err := d.ForEach("nope", func(_, _ []byte) error { return nil }); err == nil {
		t.Error("ForEach over an unknown kind succeeded")
	}
}

func TestDefsConcurrentPut(t *testing.T) {
	dir := t.TempDir()
	d := openT(t, dir)
	const workers, each = 16, 20
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				kind := Kinds[(w+i)%len(Kinds)]
				if err := d.Put(kind, fmt.Sprintf("w%d-%d", w, i), []byte(kind)); err != nil {
					errs <- err
				}
				if i%5 == 4 {
					if err := d.Delete(kind, fmt.Sprintf("w%d-%d", w, i)); err != nil {
						errs <- err
					}
				}
				_ = d.ForEach(kind, func(_, _ []byte) error { return nil })
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	d.Close()
	d = openT(t, dir)
	defer d.Close()
	n := 0
	for _, k := range Kinds {
		for key, v := range dump(t, d, k) {
			if v != k {
				t.Errorf("%s/%s = %q", k, key, v)
			}
			n++
		}
	}
	if want := workers * each * 4 / 5; n != want {
		t.Fatalf("%d keys after reopen, want %d", n, want)
	}
}

func TestDefsSecondOpenWaitsForLock(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the lock timeout")
	}
	dir := t.TempDir()
	d := openT(t, dir)
	defer d.Close()
	if d2, err := Open(dir); err == nil {
		d2.Close()
		t.Fatal("a second Open of a locked database succeeded")
	}
}
