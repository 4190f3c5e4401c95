// Package atpauthz is the ATP catalogue's contribution to the mesh's
// Cedar authorization (pkg/authz): its schema fragment (entity Booking in
// [Project]; context attributes booking_object_id, booking_state, hem_id;
// the ATPAction actions every project's policies may name), its entity
// loader (a call bound to a booking has resource Booking::"<id>" with the
// booking's current state), the MCP-403-SCOPE denial body, and the
// Windley context block (RenderContext, WindleyTemplateVersion).
//
// The mesh assembly registers it: cmd/utpmesh at start
// (authz.RegisterCatalogue, so every schema knows ATP's names) and as the
// gate's resolver with the booking states of its data directory
// (mesh.AuthConfig.Catalogues).
package atpauthz
