package atpauthz_test

import (
	"os"
	"testing"

	"github.com/utpmesh/utpmesh/services/atp/atpauthz"
)

// TestMain registers the ATP catalogue, as the mesh assembly does.
func TestMain(m *testing.M) {
	atpauthz.Register()
	os.Exit(m.Run())
}
