package hem

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// Expansion is the structured mandate expansion request of a
// HEM-MANDATE-01 task (seed decision MCP-D15, §3.4A.4 step 2): the exact
// Cedar action and resource condition the agent's mandate lacks. It comes
// from the invocation's context: the Windley helper's JSON in
// context.agent_assessment (services/atp/windley.MandateGap), or
// context.requested_action (+ resource_condition).
type Expansion struct {
	// Action is the Cedar action requested, e.g. ATPAction::"update_pre_arrangement".
	Action string `json:"missing_action"`
	// ToolName is the tool the agent's plan needs ("" when not said).
	ToolName string `json:"tool_name,omitempty"`
	// ResourceCondition is the resource the action is asked for, as Cedar
	// text (e.g. resource == Booking::"…").
	ResourceCondition string `json:"resource_condition,omitempty"`
	// HEMID and BookingState are set for HEM_INVOKE gaps.
	HEMID        string `json:"hem_id,omitempty"`
	BookingState string `json:"booking_state,omitempty"`
	// Assessment is the agent's reason.
	Assessment string `json:"agent_assessment,omitempty"`
}

// Requester is what an approval needs of the invoking call's mandate:
// its claims and policies, not its signature (the task never holds a
// usable token of the agent).
type Requester struct {
	JTI         string   `json:"jti"`
	Issuer      string   `json:"iss"`
	Subject     string   `json:"sub"`
	ExpiresAt   int64    `json:"exp"`
	Resource    *string  `json:"booking_object_id"`
	ParentChain []string `json:"parent_chain"`
	AgentPub    string   `json:"agent_pub,omitempty"`
	PolicySet   string   `json:"policy_set"`
}

// Grant is the narrowed sub-mandate an approved expansion issued.
type Grant struct {
	// Token is the signed sub-mandate (delivered to the agent only, in
	// the task's resolution in its turn).
	Token string `json:"mandate,omitempty"`
	JTI   string `json:"mandate_jti"`
	// ParentJTI is the parent mandate it was narrowed from.
	ParentJTI string `json:"parent_mandate_jti"`
	// Policy is the policy added to the agent's policies.
	Policy    string `json:"granted_policy"`
	ExpiresAt int64  `json:"exp"`
}

// actionForm is a Cedar action entity: Type::"id".
var actionForm = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(::[A-Za-z_][A-Za-z0-9_]*)*::"[^"\\]+"$`)

// ParseExpansion reads the structured request of a HEM-MANDATE-01
// invocation's context, or returns nil when it names no Cedar action (a
// free-text escalation: an approval then records the decision and issues
// nothing).
func ParseExpansion(context json.RawMessage) *Expansion {
	var c struct {
		Assessment        string `json:"agent_assessment"`
		RequestedAction   string `json:"requested_action"`
		ResourceCondition string `json:"resource_condition"`
	}
	if json.Unmarshal(context, &c) != nil {
		return nil
	}
	e := &Expansion{}
	if s := strings.TrimSpace(c.Assessment); strings.HasPrefix(s, "{") {
		_ = json.Unmarshal([]byte(s), e)
	} else {
		e.Assessment = c.Assessment
	}
	if c.RequestedAction != "" {
		e.Action = c.RequestedAction
	}
	if c.ResourceCondition != "" {
		e.ResourceCondition = c.ResourceCondition
	}
	e.Action = strings.TrimSpace(e.Action)
	if e.Action == "" {
		return nil
	}
	return e
}

// Valid reports whether the requested action is a Cedar action entity.
func (e *Expansion) Valid() bool { return actionForm.MatchString(e.Action) }

// Prompt is the operator's confirmation prompt of a task: for a
// HEM-MANDATE-01 expansion the seed's structured escalation (the exact
// Cedar action and resource condition requested, MCP-D15), else the HEM
// and the agent's assessment.
func (t *Task) Prompt() string {
	var b strings.Builder
	if x := t.Expansion; x != nil {
		fmt.Fprintf(&b, "%s mandate gap: agent %s asks for %s", t.HEMID, t.AgentID, x.Action)
		if x.ResourceCondition != "" {
			fmt.Fprintf(&b, " on %s", x.ResourceCondition)
		}
		var more []string
		if x.ToolName != "" {
			more = append(more, "tool "+x.ToolName)
		}
		if x.HEMID != "" {
			more = append(more, "hem_id "+x.HEMID)
		}
		if x.BookingState != "" {
			more = append(more, "booking state "+x.BookingState)
		}
		if t.Requester != nil && t.Requester.JTI != "" {
			more = append(more, "its mandate "+t.Requester.JTI)
		}
		if len(more) > 0 {
			fmt.Fprintf(&b, " (%s)", strings.Join(more, ", "))
		}
		if x.Assessment != "" {
			fmt.Fprintf(&b, ". Why: %s", x.Assessment)
		}
		b.WriteString(". Approving issues the agent a sub-mandate with this permit, narrowed from the mandate its own was narrowed from (never wider); declining leaves its mandate as it is.")
		return b.String()
	}
	var c struct {
		Trigger    string `json:"trigger_reason"`
		Assessment string `json:"agent_assessment"`
		Recommend  string `json:"recommended_action"`
	}
	_ = json.Unmarshal(t.Context, &c)
	fmt.Fprintf(&b, "%s (%s) from agent %s", t.HEMID, c.Trigger, t.AgentID)
	if t.BookingID != "" {
		fmt.Fprintf(&b, " on booking %s", t.BookingID)
	}
	if c.Assessment != "" {
		fmt.Fprintf(&b, ": %s", c.Assessment)
	}
	if c.Recommend != "" {
		fmt.Fprintf(&b, " Recommended: %s", c.Recommend)
	}
	return b.String()
}
