package mandate_test

import (
	"context"
	"fmt"
	"time"

	"github.com/utpmesh/utpmesh/pkg/mandate"
)

// A project's issuer signs a mandate for agent-1; the gate verifies it.
func Example() {
	key, _ := mandate.GenerateKey("demo")
	now := time.Now()
	tok, err := mandate.Issue(key, mandate.Claims{
		Subject:   "agent-1",
		ExpiresAt: now.Add(time.Hour).Unix(),
		Mandate:   mandate.Grant{PolicySet: `permit(principal == Agent::"agent-1", action == Action::"echo", resource);`},
	}, now)
	if err != nil {
		fmt.Println(err)
		return
	}
	v := &mandate.Verifier{Keys: mandate.StaticKeys{key}}
	m, err := v.Verify(context.Background(), tok, mandate.IssuerName("demo"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(m.Header.Typ, m.Claims.Subject, m.Claims.Issuer, m.Claims.BoundResource() == "")
	// Output: atp-mandate+jwt agent-1 utpmesh:project:demo true
}
