package imagestore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/utpmesh/utpmesh/services/cynode/internal/imagestore"
)

// BenchmarkImport imports a docker save archive of 2000 files, 32 MiB,
// in two layers (validation pass, flattening, unpacking).
func BenchmarkImport(b *testing.B) {
	body := strings.Repeat("x", 16<<10)
	var l1, l2 []E
	for i := range 1000 {
		l1 = append(l1, E{Name: fmt.Sprintf("usr/share/a/%04d", i), Body: body})
		l2 = append(l2, E{Name: fmt.Sprintf("usr/share/b/%04d", i), Body: body})
	}
	archive := SaveDocker(b, Image(b, Layer(b, l1...), Layer(b, l2...)), "example.com/bench:1")
	b.ResetTimer()
	for range b.N {
		s, err := imagestore.Open(b.TempDir(), imagestore.Limits{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Import(context.Background(), archive, now); err != nil {
			b.Fatal(err)
		}
	}
}
