// Package config reads the mesh's configuration file (utpmesh up
// --config FILE, utpmesh worker --config FILE): a YAML mapping whose
// top-level keys are sections, each handed to the parser of the
// catalogue that owns it. The package knows no catalogue: the program
// passes the sections it was built with (cmd/utpmesh/catalogues.go), and
// a top-level key that names none of them is refused with the sections
// this build has.
//
// Node.Decode fills a Go value from a section strictly, by the value's
// json tags: an unknown key is refused with a "did you mean", a missing
// key tagged config:"required" is named, a value of the wrong kind says
// what to write instead, and every error starts with file:line and the
// key's path (atp.notify.smtp.port). A field tagged config:"secret" may
// be written as ${ENV_VAR} to read it from the environment, and its value
// never appears in an error. A struct with a Validate() error method is
// checked after it is filled; a FieldError from it points at that key's
// line.
package config
