package store_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/utpmesh/utpmesh/internal/meshtest"
	"github.com/utpmesh/utpmesh/services/cynode/store"
)

// Two workers on the replicated state (two connections) serve one
// dataset: what one writes the other reads, compare-and-set updates of a
// setting let one writer win across both, concurrent artifact puts get
// distinct versions, and a skill updated on one reads back whole on the
// other, its previous body gone.
func TestTwoWorkersOneDataset(t *testing.T) {
	srv := meshtest.NATS(t)
	a, bs := openShared(t, meshtest.Conn(t, srv), meshtest.Conn(t, srv))
	b := bs[0]
	if err := a.PutTask(ctx, store.Task{ID: "t1", ProjectID: "p"}); err != nil {
		t.Fatal(err)
	}
	if got, err := b.GetTask(ctx, "t1"); err != nil || got.Status != store.StatusPending {
		t.Fatalf("task through the other worker: %+v, %v", got, err)
	}
	if _, err := a.CreateSetting(ctx, store.SystemScope, store.Setting{Key: "k", Value: 0}, store.Write{At: at}); err != nil {
		t.Fatal(err)
	}
	const n = 8
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		wins      int
		conflicts int
		versions  []int64
	)
	for i := range n {
		s := []*store.Engine{a, b}[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := s.UpdateSetting(ctx, store.SystemScope, store.Setting{Key: "k", Value: i}, store.Write{ExpectedVersion: v(1), At: at})
			art, aerr := s.PutArtifact(ctx, "t1", "out.md", []byte(fmt.Sprintf("content %d", i)), at)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				wins++
			case errors.Is(err, store.ErrConflict):
				conflicts++
			default:
				t.Errorf("update: %v", err)
			}
			if aerr != nil {
				t.Errorf("put artifact: %v", aerr)
			}
			versions = append(versions, art.Version)
		}()
	}
	wg.Wait()
	if wins != 1 || conflicts != n-1 {
		t.Errorf("compare-and-set across workers: %d wins, %d conflicts; want 1 and %d", wins, conflicts, n-1)
	}
	slices.Sort(versions)
	for i, got := range versions {
		if got != int64(i+1) {
			t.Fatalf("artifact versions %v; want 1..%d", versions, n)
		}
	}
	art, content, err := b.GetArtifact(ctx, "t1", "out.md")
	if err != nil || art.Version != n || string(content) != fmt.Sprintf("content %d", contentIndex(t, art.SHA256, n)) {
		t.Fatalf("artifact through the other worker: %+v %q, %v", art, content, err)
	}

	if err := a.PutSkill(ctx, store.Skill{ID: "s1", Name: "one", Content: "# first body"}); err != nil {
		t.Fatal(err)
	}
	if err := b.PutSkill(ctx, store.Skill{ID: "s1", Name: "one", Content: "# second body"}); err != nil {
		t.Fatal(err)
	}
	if sk, err := a.GetSkill(ctx, "s1"); err != nil || sk.Content != "# second body" {
		t.Fatalf("skill through the other worker: %+v, %v", sk, err)
	}
	if err := a.DeleteSkill(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.GetSkill(ctx, "s1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("deleted skill through the other worker: %v", err)
	}
}

// contentIndex finds which writer's content has sum.
func contentIndex(t *testing.T, sum string, n int) int {
	t.Helper()
	for i := range n {
		if x := sha256.Sum256([]byte(fmt.Sprintf("content %d", i))); hex.EncodeToString(x[:]) == sum {
			return i
		}
	}
	t.Fatalf("no writer's content has sha256 %s", sum)
	return -1
}

// A skill's earlier bodies do not stay behind: updates and the delete
// remove them from the blob store.
func TestSkillBodiesDoNotLinger(t *testing.T) {
	dir := t.TempDir()
	s := openLocal(t, dir)
	blobs := func() int {
		ents, err := os.ReadDir(filepath.Join(dir, "blobs"))
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	for i := range 3 {
		if err := s.PutSkill(ctx, store.Skill{ID: "s1", Content: fmt.Sprintf("body %d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if n := blobs(); n != 1 {
		t.Fatalf("%d blobs after three versions of one skill; want 1", n)
	}
	if err := s.DeleteSkill(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if n := blobs(); n != 0 {
		t.Fatalf("%d blobs after the skill's delete; want 0", n)
	}
}
