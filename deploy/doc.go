// Package deploy holds no code. Its tests validate, offline, the deployment
// material in this directory: the container image's scripts (docker/), the
// compose cluster (compose/), the systemd units (systemd/) and the
// Kubernetes manifests (k8s/). They parse every YAML file and check its
// structure (names, labels and selectors agree, probes hit the metrics
// port, volumes are mounted), and they run the real utpmesh binary over
// every utpmesh command line found there: its flag parser (a flag that
// does not exist fails), and for 'up' and 'worker' the checks a start makes
// before it opens its data directory. See deploy/README.md.
package deploy
