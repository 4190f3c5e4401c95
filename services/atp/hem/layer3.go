package hem

// layer3 is the HEM invocation catalogue of the public Activity Travel
// Protocol Layer 3 specification (section 6, HEM-01…HEM-23): for each
// invocation point its priority, escalation_reason values (the accepted
// trigger_reason), protocol_deadline default, whether confirming needs a
// human_confirmation_token, and the secondary path. The seeds name only
// HEM-MANDATE-01; these rows are taken from that public catalogue (facts,
// not text) and described in docs/catalogues/atp.md.
//
// States are the booking's tool states (the gate's booking_state) in which
// the invocation point can occur: a suspension HEM needs the
// BOOKING_SUSPENDED overlay, a traveller-unreachable or welfare HEM an
// in-journey booking (JOURNEY). Outcomes and secondary paths are recorded
// on the task and in the booking's event log; a state change that follows
// (cancel, resume, reinstate) stays an operator's transition, as the
// specification leaves handler behaviour to the implementer (its design
// rule T-5-C).
var layer3 = []Entry{
	// P1 — critical.
	{HEMID: "HEM-01", Title: "Suspension during activity fulfilment (highest priority)", Priority: "P1", Deadline: "PT5M",
		States: []string{"BOOKING_SUSPENDED"}, NeedsBooking: true, TokenRequired: true, Outcome: "SUSPENSION_HANDLED",
		TriggerReasons: []string{"TRAVELER_DECEASED_FULFILLMENT", "LEGAL_HOLD_FULFILLMENT", "FORCE_MAJEURE_FULFILLMENT"},
		Secondary:      held("re-dispatch to the secondary handler; without one HEM_NO_SECONDARY_PATH is recorded, the booking stays suspended with an elevated alert")},
	{HEMID: "HEM-02", Title: "Traveller deceased (TU-5): initial escalation", Priority: "P1", Deadline: "PT15M",
		States: []string{"BOOKING_SUSPENDED"}, NeedsBooking: true, TokenRequired: true, Outcome: "SUSPENSION_EXIT_PATH_CHOSEN",
		TriggerReasons: []string{"TRAVELER_DECEASED"},
		Secondary:      held("re-dispatch with increased urgency (PT10M); then the incident record is preserved and the booking held for manual intervention")},
	{HEMID: "HEM-03", Title: "Traveller victim of crime (TU-6): initial escalation", Priority: "P1", Deadline: "PT10M",
		States: []string{"JOURNEY", "BOOKING_SUSPENDED"}, NeedsBooking: true, TokenRequired: true, Outcome: "AUTHORITY_CONFIRMED",
		TriggerReasons: []string{"TRAVELER_VICTIM_OF_CRIME"},
		Secondary:      held("re-dispatch with increased urgency; no autonomous action in any circumstance, the booking is held")},
	{HEMID: "HEM-04", Title: "Traveller missing (TU-2): initial escalation", Priority: "P1", Deadline: "PT15M",
		States: []string{"JOURNEY", "BOOKING_SUSPENDED"}, NeedsBooking: true, TokenRequired: true, Outcome: "MISSING_TRAVELLER_HANDLED",
		TriggerReasons: []string{"TRAVELER_MISSING"},
		Secondary:      held("re-issued with an urgency flag; then the booking is held for manual intervention and the incident record preserved")},
	{HEMID: "HEM-05", Title: "Suspension in destination", Priority: "P1", Deadline: "PT10M",
		States: []string{"BOOKING_SUSPENDED"}, NeedsBooking: true, TokenRequired: true, Outcome: "SUSPENSION_HANDLED",
		TriggerReasons: []string{"TRAVELER_DECEASED_DESTINATION", "LEGAL_HOLD_DESTINATION", "FORCE_MAJEURE_DESTINATION"},
		Secondary:      held("re-dispatch to the secondary handler; without one HEM_NO_SECONDARY_PATH is recorded and the booking held")},
	// P2 — high.
	{HEMID: "HEM-06", Title: "Suspension in outbound transit", Priority: "P2", Deadline: "PT15M",
		States: []string{"BOOKING_SUSPENDED"}, NeedsBooking: true, TokenRequired: true, Outcome: "SUSPENSION_HANDLED",
		TriggerReasons: []string{"TRAVELER_DECEASED_TRANSIT", "LEGAL_HOLD_TRANSIT", "FORCE_MAJEURE_TRANSIT"},
		Secondary:      held("re-dispatch to the secondary handler; without one the booking is held")},
	{HEMID: "HEM-07", Title: "Suspension in return transit", Priority: "P2", Deadline: "PT15M",
		States: []string{"BOOKING_SUSPENDED"}, NeedsBooking: true, TokenRequired: true, Outcome: "SUSPENSION_HANDLED",
		TriggerReasons: []string{"TRAVELER_DECEASED_RETURN", "LEGAL_HOLD_RETURN", "FORCE_MAJEURE_RETURN"},
		Secondary:      held("re-dispatch to the secondary handler; without one the booking is held")},
	{HEMID: "HEM-08", Title: "Suspension on arrival", Priority: "P2", Deadline: "PT15M",
		States: []string{"BOOKING_SUSPENDED"}, NeedsBooking: true, TokenRequired: true, Outcome: "SUSPENSION_HANDLED",
		TriggerReasons: []string{"TRAVELER_DECEASED_ARRIVAL", "LEGAL_HOLD_ARRIVAL", "FORCE_MAJEURE_ARRIVAL"},
		Secondary:      held("re-dispatch to the secondary handler; without one the booking is held")},
	{HEMID: "HEM-09", Title: "Traveller unreachable (TU-1) during activity fulfilment", Priority: "P2", Deadline: "PT30M",
		States: []string{"JOURNEY"}, NeedsBooking: true, Outcome: "TRAVELLER_REACHED",
		TriggerReasons: []string{"TRAVELER_UNREACHABLE_FULFILLMENT"},
		Secondary:      held("the booking enters PARTY_UNRESPONSIVE (an operator transition); a state change needs a human confirmation")},
	{HEMID: "HEM-10", Title: "Traveller departed irregularly (TU-3b)", Priority: "P2", Deadline: "PT30M",
		States: []string{"JOURNEY"}, NeedsBooking: true, TokenRequired: true, Outcome: "IRREGULAR_DEPARTURE_CONFIRMED",
		TriggerReasons: []string{"TRAVELER_DEPARTED_IRREGULARLY"},
		Secondary:      held("re-dispatch with an urgency flag; the booking party's commercial and legal team is notified")},
	// P3 — operational.
	{HEMID: "HEM-11", Title: "Policy assembly failure blocking a decision", Priority: "P3", Deadline: "PT10M",
		NeedsBooking: true, TokenRequired: true, Outcome: "ASSEMBLY_OVERRIDDEN",
		TriggerReasons: []string{"ASSEMBLY_FAILURE", "CONFIDENCE_UNDERRUN", "REASONING_INSUFFICIENT"},
		Secondary:      held("the blocked operation is cancelled; retrying it needs a human decision (PT10M is also the protocol maximum)")},
	{HEMID: "HEM-12", Title: "Security event revocation during an autonomous reversal window", Priority: "P3", Deadline: "PT1H",
		NeedsBooking: true, TokenRequired: true, Outcome: "DECLARATION_CONFIRMED",
		TriggerReasons: []string{"SSF_REVOCATION_DURING_C1"},
		Secondary: Secondary{Status: StatusComplete, Outcome: "DECLARATION_AUTO_REVERSED",
			Description: "after the maximum freeze (PT1H, not configurable) the disruption declaration is reversed (INCIDENT_REVERSED, reason SSF_HANDLER_TIMEOUT) and the booking party notified"}},
	{HEMID: "HEM-13", Title: "Traveller unreachable (TU-1/TU-4) in standard phases", Priority: "P3", Deadline: "PT30M",
		States: []string{"JOURNEY"}, NeedsBooking: true, Outcome: "TRAVELLER_REACHED",
		TriggerReasons: []string{"TRAVELER_UNREACHABLE_UNRESOLVED"},
		Secondary:      held("PARTY_UNRESPONSIVE rules apply (an operator transition)")},
	{HEMID: "HEM-14", Title: "Supplier confirmation timeout with partial confirmation", Priority: "P3", Deadline: "PT24H",
		States: []string{"PENDING_CONFIRMATION"}, NeedsBooking: true, TokenRequired: true, Outcome: "BOOKING_CONTINUED",
		TriggerReasons: []string{"CONFIRMATION_TIMEOUT"},
		Secondary:      held("the booking is cancelled with cancellation_reason CONFIRMATION_TIMEOUT (its own PENDING_CONFIRMATION clock)")},
	{HEMID: "HEM-15", Title: "Amendment timeout", Priority: "P3", Deadline: "PT2H",
		States: []string{"AMENDMENT"}, NeedsBooking: true, TokenRequired: true, Outcome: "AMENDMENT_DECIDED",
		TriggerReasons: []string{"AMENDMENT_TIMEOUT"},
		Secondary: Secondary{Status: StatusComplete, Outcome: "ORIGINAL_BOOKING_REINSTATED",
			Description: "the original booking is reinstated by default pending a human decision"}},
	{HEMID: "HEM-16", Title: "Disruption review timeout", Priority: "P3", Deadline: "PT1H",
		States: []string{"DISRUPTION_REVIEW"}, NeedsBooking: true, TokenRequired: true, Outcome: "RESOLUTION_PATH_SELECTED",
		TriggerReasons: []string{"DISRUPTION_REVIEW_TIMEOUT"},
		Secondary:      held("the booking enters PARTY_UNRESPONSIVE (its own DISRUPTION_REVIEW clock)")},
	{HEMID: "HEM-17", Title: "Fulfilling party unresponsive during fulfilment", Priority: "P3", Deadline: "PT30M",
		States: []string{"JOURNEY", "PARTY_UNRESPONSIVE"}, NeedsBooking: true, TokenRequired: true, Outcome: "ALTERNATIVE_SOURCED",
		TriggerReasons: []string{"PARTY_UNRESPONSIVE_FULFILLMENT"},
		Secondary:      held("alternative sourcing within the duty-of-care party's authority where the SF-1 rules apply")},
	{HEMID: "HEM-18", Title: "Supplier substitution (SF-2) needs the traveller's acceptance", Priority: "P3", Deadline: "PT2H",
		States: []string{"JOURNEY"}, NeedsBooking: true, TokenRequired: true, Outcome: "SUBSTITUTION_ACCEPTED",
		TriggerReasons: []string{"SUPPLIER_FAILURE_SUBSTITUTION_REQUIRED"},
		Secondary: Secondary{Status: StatusComplete, Outcome: "SUBSTITUTION_REJECTED",
			Description: "the substitution counts as rejected and the incident as complete non-delivery (SF-1) for claims; never accepted autonomously"}},
	{HEMID: "HEM-19", Title: "Traveller found: condition assessment", Priority: "P3", Deadline: "PT30M",
		States: []string{"JOURNEY", "BOOKING_SUSPENDED"}, NeedsBooking: true, TokenRequired: true, Outcome: "CONDITION_ASSESSED",
		TriggerReasons: []string{"TRAVELER_FOUND_CONDITION_ASSESSMENT"},
		Secondary:      held("the unreachable chain stays open")},
	{HEMID: "HEM-20", Title: "Recovered: condition assessment", Priority: "P3", Deadline: "PT30M",
		States: []string{"JOURNEY", "BOOKING_SUSPENDED"}, NeedsBooking: true, TokenRequired: true, Outcome: "CONDITION_ASSESSED",
		TriggerReasons: []string{"RECOVERED_CONDITION_ASSESSMENT"},
		Secondary:      held("the wellness event stays open")},
	// P4 — administrative.
	{HEMID: "HEM-21", Title: "Suspension on return arrival", Priority: "P4", Deadline: "PT2H",
		States: []string{"BOOKING_SUSPENDED"}, NeedsBooking: true, TokenRequired: true, Outcome: "SUSPENSION_EXIT_PATH_CHOSEN",
		TriggerReasons: []string{"SUSPENDED_RETURN_ARRIVAL"},
		Secondary:      held("the booking stays suspended; an elevated alert is set when there is no secondary handler")},
	{HEMID: "HEM-22", Title: "Suspension in the completion phase", Priority: "P4", Deadline: "PT4H",
		States: []string{"BOOKING_SUSPENDED"}, NeedsBooking: true, TokenRequired: true, Outcome: "SUSPENSION_EXIT_PATH_CHOSEN",
		TriggerReasons: []string{"SUSPENDED_COMPLETION_PHASE"},
		Secondary:      held("the booking stays suspended")},
	{HEMID: "HEM-23", Title: "Traveller overdue (TU-3a)", Priority: "P4", Deadline: "PT60M",
		States: []string{"JOURNEY"}, NeedsBooking: true, Outcome: "OVERDUE_RESOLVED",
		TriggerReasons: []string{"TRAVELER_OVERDUE"},
		Secondary:      held("standard PARTY_UNRESPONSIVE rules apply (an operator transition)")},
}

// held is the secondary path of an invocation whose deadline leaves the
// booking as it is for a human: the task ends DECLINED with why.
func held(why string) Secondary {
	return Secondary{Status: StatusDeclined, Description: why}
}
