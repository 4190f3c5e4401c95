package deploy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// k8sObject is the part of a Kubernetes object the tests check.
type k8sObject struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name        string            `yaml:"name"`
		Labels      map[string]string `yaml:"labels"`
		Annotations map[string]string `yaml:"annotations"`
	} `yaml:"metadata"`
	Spec k8sSpec `yaml:"spec"`
	file string
}

type k8sSpec struct {
	// Service
	ClusterIP                string            `yaml:"clusterIP"`
	PublishNotReadyAddresses bool              `yaml:"publishNotReadyAddresses"`
	Selector                 yaml.Node         `yaml:"selector"`
	Ports                    []k8sServicePort  `yaml:"ports"`
	Type                     string            `yaml:"type"`
	AccessModes              []string          `yaml:"accessModes"`
	Resources                map[string]any    `yaml:"resources"`
	Strategy                 map[string]string `yaml:"strategy"`
	// StatefulSet, Deployment
	Replicas            *int   `yaml:"replicas"`
	ServiceName         string `yaml:"serviceName"`
	PodManagementPolicy string `yaml:"podManagementPolicy"`
	Template            struct {
		Metadata struct {
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"metadata"`
		Spec k8sPodSpec `yaml:"spec"`
	} `yaml:"template"`
	VolumeClaimTemplates []struct {
		Metadata struct {
			Name string `yaml:"name"`
		} `yaml:"metadata"`
	} `yaml:"volumeClaimTemplates"`
}

type k8sServicePort struct {
	Name       string `yaml:"name"`
	Port       int    `yaml:"port"`
	TargetPort string `yaml:"targetPort"`
}

type k8sPodSpec struct {
	TerminationGracePeriodSeconds int `yaml:"terminationGracePeriodSeconds"`
	SecurityContext               struct {
		RunAsNonRoot bool `yaml:"runAsNonRoot"`
		RunAsUser    int  `yaml:"runAsUser"`
	} `yaml:"securityContext"`
	Containers []k8sContainer `yaml:"containers"`
	Volumes    []struct {
		Name   string `yaml:"name"`
		Secret *struct {
			SecretName string `yaml:"secretName"`
		} `yaml:"secret"`
		PersistentVolumeClaim *struct {
			ClaimName string `yaml:"claimName"`
		} `yaml:"persistentVolumeClaim"`
		EmptyDir any `yaml:"emptyDir"`
	} `yaml:"volumes"`
}

type k8sContainer struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Env     []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			FieldRef *struct {
				FieldPath string `yaml:"fieldPath"`
			} `yaml:"fieldRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	Ports []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	ReadinessProbe *k8sProbe `yaml:"readinessProbe"`
	LivenessProbe  *k8sProbe `yaml:"livenessProbe"`
	VolumeMounts   []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
		ReadOnly  bool   `yaml:"readOnly"`
	} `yaml:"volumeMounts"`
}

type k8sProbe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
}

// loadK8s parses every document of every YAML file in k8s/.
func loadK8s(t *testing.T) []k8sObject {
	t.Helper()
	files, _ := filepath.Glob("k8s/*.yaml")
	if len(files) == 0 {
		t.Fatal("k8s: no YAML files")
	}
	var out []k8sObject
	for _, f := range files {
		r, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(r)
		dec.KnownFields(false)
		for i := 1; ; i++ {
			var o k8sObject
			err := dec.Decode(&o)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			o.file = fmt.Sprintf("%s document %d", f, i)
			if o.APIVersion == "" || o.Kind == "" || o.Metadata.Name == "" {
				t.Errorf("%s: want apiVersion, kind and metadata.name", o.file)
			}
			out = append(out, o)
		}
		_ = r.Close()
	}
	return out
}

// selector returns a Service's selector or a workload's matchLabels.
func (o k8sObject) selector(t *testing.T) map[string]string {
	t.Helper()
	var m struct {
		MatchLabels map[string]string `yaml:"matchLabels"`
	}
	var plain map[string]string
	if o.Kind == "Service" {
		if err := o.Spec.Selector.Decode(&plain); err != nil {
			t.Fatalf("%s: selector: %v", o.file, err)
		}
		return plain
	}
	if err := o.Spec.Selector.Decode(&m); err != nil {
		t.Fatalf("%s: selector: %v", o.file, err)
	}
	return m.MatchLabels
}

func matches(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// k8sCommand is the utpmesh command line of a container (the image's
// entrypoint is utpmesh; $(VAR) references are expanded as the kubelet
// does, with pod stands for metadata.name).
func k8sCommand(t *testing.T, o k8sObject, c k8sContainer, pod string) cmdline {
	t.Helper()
	if len(c.Command) > 0 && !(len(c.Command) == 1 && c.Command[0] == "utpmesh") {
		t.Fatalf("%s container %s: command %v: want the image's entrypoint (utpmesh)", o.file, c.Name, c.Command)
	}
	vars := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			vars[e.Name] = pod
		case e.ValueFrom == nil:
			vars[e.Name] = e.Value
		}
	}
	var argv []string
	for _, a := range c.Args {
		for k, v := range vars {
			a = strings.ReplaceAll(a, "$("+k+")", v)
		}
		if strings.Contains(a, "$(") {
			t.Errorf("%s container %s: %q refers to an undefined variable", o.file, c.Name, a)
		}
		argv = append(argv, a)
	}
	return cmdline{src: fmt.Sprintf("%s %s/%s container %s", o.file, o.Kind, o.Metadata.Name, c.Name), argv: argv}
}

// TestK8sManifests checks that the manifests fit together — selectors
// select the pod templates, the routes name every StatefulSet pod through
// the headless Service, probes and scrape annotations hit the metrics
// port, every mount has a volume, secrets and claims exist — and runs the
// CLI over every container's command line for every pod of it.
func TestK8sManifests(t *testing.T) {
	objs := loadK8s(t)
	root := t.TempDir()
	copyTree(t, shared(t), filepath.Join(root, "/shared"), true)
	byKind := map[string][]k8sObject{}
	for _, o := range objs {
		byKind[o.Kind] = append(byKind[o.Kind], o)
	}
	if len(byKind["StatefulSet"]) != 1 || len(byKind["Deployment"]) == 0 {
		t.Fatalf("k8s: want one StatefulSet (the nodes) and Deployments (workers); have %v", kinds(objs))
	}
	services := map[string]k8sObject{}
	for _, s := range byKind["Service"] {
		services[s.Metadata.Name] = s
	}
	claims := map[string]bool{}
	for _, c := range byKind["PersistentVolumeClaim"] {
		claims[c.Metadata.Name] = true
	}
	secrets := map[string]bool{}

	// Every Service selects some workload's pods.
	for _, s := range services {
		sel := s.selector(t)
		found := false
		for _, o := range append(slices.Clone(byKind["StatefulSet"]), byKind["Deployment"]...) {
			found = found || matches(sel, o.Spec.Template.Metadata.Labels)
		}
		if !found {
			t.Errorf("%s: Service %s selects no pod template (%v)", s.file, s.Metadata.Name, sel)
		}
	}

	sts := byKind["StatefulSet"][0]
	headless, ok := services[sts.Spec.ServiceName]
	switch {
	case !ok:
		t.Errorf("StatefulSet %s: serviceName %q is no Service", sts.Metadata.Name, sts.Spec.ServiceName)
	case headless.Spec.ClusterIP != "None" || !headless.Spec.PublishNotReadyAddresses:
		t.Errorf("Service %s: want clusterIP: None and publishNotReadyAddresses: true (routes resolve before the nodes are ready)", headless.Metadata.Name)
	}
	if sts.Spec.PodManagementPolicy != "Parallel" {
		t.Errorf("StatefulSet %s: podManagementPolicy %q, want Parallel (a node waits for the others)", sts.Metadata.Name, sts.Spec.PodManagementPolicy)
	}
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 3 {
		t.Errorf("StatefulSet %s: want replicas: 3", sts.Metadata.Name)
	}
	clientPort := 0
	for _, s := range services {
		if s.Spec.ClusterIP != "None" && matches(s.selector(t), sts.Spec.Template.Metadata.Labels) {
			for _, p := range s.Spec.Ports {
				if p.Port == 4222 {
					clientPort = p.Port
				}
			}
		}
	}
	if clientPort == 0 {
		t.Errorf("k8s: no client Service on port 4222 for the nodes")
	}

	for _, o := range append(slices.Clone(byKind["StatefulSet"]), byKind["Deployment"]...) {
		if !matches(o.selector(t), o.Spec.Template.Metadata.Labels) {
			t.Errorf("%s: selector %v does not select its own pod template %v", o.file, o.selector(t), o.Spec.Template.Metadata.Labels)
		}
		pod := o.Spec.Template.Spec
		vols := map[string]bool{}
		for _, v := range pod.Volumes {
			vols[v.Name] = true
			if v.Secret != nil {
				secrets[v.Secret.SecretName] = true
			}
			if v.PersistentVolumeClaim != nil && !claims[v.PersistentVolumeClaim.ClaimName] {
				t.Errorf("%s: volume %s: PersistentVolumeClaim %s is not in k8s/", o.file, v.Name, v.PersistentVolumeClaim.ClaimName)
			}
		}
		for _, vc := range o.Spec.VolumeClaimTemplates {
			vols[vc.Metadata.Name] = true
		}
		if !pod.SecurityContext.RunAsNonRoot {
			t.Errorf("%s: want securityContext.runAsNonRoot", o.file)
		}
		replicas := 1
		if o.Spec.Replicas != nil {
			replicas = *o.Spec.Replicas
		}
		for _, c := range pod.Containers {
			ports := map[string]int{}
			for _, p := range c.Ports {
				ports[p.Name] = p.ContainerPort
			}
			for _, m := range c.VolumeMounts {
				if !vols[m.Name] {
					t.Errorf("%s container %s: mount %s has no volume", o.file, c.Name, m.Name)
				}
			}
			cmd := k8sCommand(t, o, c, o.Metadata.Name+"-0")
			addr, _ := flagValue(cmd.argv, "metrics-addr")
			_, mport, err := net.SplitHostPort(addr)
			if err != nil {
				t.Errorf("%s: --metrics-addr %q: %v", cmd, addr, err)
			}
			if strconv.Itoa(ports["metrics"]) != mport {
				t.Errorf("%s: containerPort metrics %d, but --metrics-addr %s", cmd.src, ports["metrics"], addr)
			}
			// Readiness is /readyz (false without quorum, with a full disk),
			// liveness /healthz (the process runs): a node that cannot take
			// calls leaves the Service without being restarted.
			for _, pr := range []struct {
				name, path string
				p          *k8sProbe
			}{{"readinessProbe", "/readyz", c.ReadinessProbe}, {"livenessProbe", "/healthz", c.LivenessProbe}} {
				if pr.p == nil || pr.p.HTTPGet == nil || pr.p.HTTPGet.Path != pr.path || pr.p.HTTPGet.Port != "metrics" {
					t.Errorf("%s: want %s httpGet %s on port metrics", cmd.src, pr.name, pr.path)
				}
			}
			ann := o.Spec.Template.Metadata.Annotations
			if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != mport || ann["prometheus.io/path"] != "/metrics" {
				t.Errorf("%s: want prometheus.io/scrape \"true\", port %q, path /metrics; have %v", o.file, mport, ann)
			}
			drain, _ := flagValue(cmd.argv, "drain-timeout")
			if d, err := time.ParseDuration(drain); err != nil || time.Duration(pod.TerminationGracePeriodSeconds)*time.Second <= d+10*time.Second {
				t.Errorf("%s: terminationGracePeriodSeconds %d is not above --drain-timeout %q + 10 s", o.file, pod.TerminationGracePeriodSeconds, drain)
			}
			for _, fl := range []string{"data", "creds", "creds-dir", "keys-dir", "cluster-secret-file"} {
				if p, ok := flagValue(cmd.argv, fl); ok && !mounted(c, p) {
					t.Errorf("%s: --%s %s is on no volume mount", cmd.src, fl, p)
				}
			}
			if d, ok := flagValue(cmd.argv, "data"); ok && cmd.argv[0] == "worker" && replicas > 1 {
				t.Errorf("%s: %d replicas share --data %s (a service that keeps files runs once)", cmd.src, replicas, d)
			}
			switch cmd.argv[0] {
			case "up":
				checkRoutes(t, cmd, sts, headless, replicas)
			case "worker":
				u, _ := flagValue(cmd.argv, "nats")
				host, port, _ := strings.Cut(strings.TrimPrefix(u, "nats://"), ":")
				if s, ok := services[host]; !ok || s.Spec.ClusterIP == "None" || strconv.Itoa(clientPort) != port {
					t.Errorf("%s: --nats %s: want the client Service on port %d", cmd.src, u, clientPort)
				}
			}
			for i := range replicas {
				pc := k8sCommand(t, o, c, fmt.Sprintf("%s-%d", o.Metadata.Name, i))
				t.Run(fmt.Sprintf("%s/%d", o.Metadata.Name, i), func(t *testing.T) {
					checkParses(t, pc)
					checkStarts(t, root, pc)
				})
			}
		}
	}
	if len(secrets) != 1 {
		t.Errorf("k8s: the pods mount secrets %v; want the one Secret deploy/README.md says how to create", secrets)
	}
	readme, _ := os.ReadFile("README.md")
	for s := range secrets {
		if !strings.Contains(string(readme), "kubectl create secret generic "+s) {
			t.Errorf("deploy/README.md does not say how to create the Secret %s", s)
		}
	}
}

// checkRoutes checks a node's cluster flags: its server name is its pod
// name, and the routes name every pod through the headless Service on the
// route port.
func checkRoutes(t *testing.T, c cmdline, sts, headless k8sObject, replicas int) {
	t.Helper()
	_, port, _ := net.SplitHostPort(mustFlag(t, c, "cluster-listen"))
	var want []string
	for i := range replicas {
		want = append(want, fmt.Sprintf("nats-route://%s-%d.%s:%s", sts.Metadata.Name, i, headless.Metadata.Name, port))
	}
	if got := strings.Split(mustFlag(t, c, "routes"), ","); !slices.Equal(sorted(got), sorted(want)) {
		t.Errorf("%s: --routes %v, want %v", c.src, got, want)
	}
	if name := mustFlag(t, c, "server-name"); name != sts.Metadata.Name+"-0" {
		t.Errorf("%s: --server-name %q, want the pod name", c.src, name)
	}
	found := false
	for _, p := range headless.Spec.Ports {
		found = found || strconv.Itoa(p.Port) == port
	}
	if !found {
		t.Errorf("Service %s has no port %s (the routes)", headless.Metadata.Name, port)
	}
}

func mounted(c k8sContainer, p string) bool {
	for _, m := range c.VolumeMounts {
		if p == m.MountPath || strings.HasPrefix(p, strings.TrimSuffix(m.MountPath, "/")+"/") {
			return true
		}
	}
	return false
}

func kinds(objs []k8sObject) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.Kind+"/"+o.Metadata.Name)
	}
	return out
}
