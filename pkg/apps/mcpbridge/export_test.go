package mcpbridge

// The ATP names the bridge knows without importing the ATP service; a
// test checks them against services/atp/tools.
var (
	ATPToolNames    = []string{toolInvokeHEM, toolHEMList, toolHEMConfirm, toolHEMDecline}
	HEMResultSuffix = hemResultSuffix
)
