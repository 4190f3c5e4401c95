package atpauthz_test

import (
	"context"
	"testing"
)

// BenchmarkGate is the gate's cost per call: mandate verification (the
// signature cached per token, key and expiry checked every call) and Cedar
// authorization of the project's and the mandate's policy sets (parsed
// once per version).
func BenchmarkGate(b *testing.B) {
	f := loadFixture(b)
	ctx := context.Background()
	req := f.request("atp_invoke_hem", "JOURNEY", "HEM-01", "", f.token)
	b.ReportAllocs()
	for b.Loop() {
		d, err := f.gate.Decide(ctx, req)
		if err != nil || !d.Allowed {
			b.Fatalf("%+v %v", d, err)
		}
	}
}

// BenchmarkGateColdVerify is the cost when every call carries a token the
// gate has not seen: a full Ed25519 verification and policy parse.
func BenchmarkGateColdVerify(b *testing.B) {
	f := loadFixture(b)
	ctx := context.Background()
	req := f.request("atp_invoke_hem", "JOURNEY", "HEM-01", "", f.token)
	b.ReportAllocs()
	for b.Loop() {
		f.gate.FlushCache()
		d, err := f.gate.Decide(ctx, req)
		if err != nil || !d.Allowed {
			b.Fatalf("%+v %v", d, err)
		}
	}
}
