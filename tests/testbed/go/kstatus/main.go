// Command gro-kstatus prints what kstatus (sigs.k8s.io/cli-utils/pkg/kstatus/status)
// computes for Kubernetes objects: Current, InProgress, Failed, Terminating, ...
//
// GitOps tools (Flux's health checks, `kubectl wait`-like appliers) decide from this
// result whether an applied object is healthy, still rolling out, or broken. The
// testbed builds this program so the tests can ask the library itself, not a
// re-implementation of its rules.
//
// Usage:
//
//	gro-kstatus [-o text|json] [FILE ...]   (no FILE or "-": read stdin)
//
// Each input holds one object, or a List (its items), as JSON or YAML. Text output is
// one line per object, "<status>\t<message>"; JSON output is one object per line with
// the keys status, message and conditions (the conditions kstatus would add).
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/yaml"
)

// version names the library that decides, since that is what a reader of the output needs.
const version = "gro-kstatus 0.1 (sigs.k8s.io/cli-utils v0.37.2)"

type output struct {
	Kind       string             `json:"kind,omitempty"`
	Name       string             `json:"name,omitempty"`
	Namespace  string             `json:"namespace,omitempty"`
	Status     string             `json:"status"`
	Message    string             `json:"message"`
	Conditions []status.Condition `json:"conditions"`
}

func main() {
	format := flag.String("o", "text", "output format: text or json")
	showVersion := flag.Bool("version", false, "print the version and exit")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: gro-kstatus [-o text|json] [FILE ...]  (no FILE or -: stdin)")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *showVersion {
		fmt.Println(version)
		return
	}
	if *format != "text" && *format != "json" {
		fail("unknown output format %q (text or json)", *format)
	}
	paths := flag.Args()
	if len(paths) == 0 {
		paths = []string{"-"}
	}
	for _, p := range paths {
		objs, err := readObjects(p)
		if err != nil {
			fail("%s: %v", p, err)
		}
		for _, u := range objs {
			res, err := status.Compute(u)
			if err != nil {
				fail("%s: %s/%s: %v", p, u.GetKind(), u.GetName(), err)
			}
			printResult(*format, u, res)
		}
	}
}

func readObjects(path string) ([]*unstructured.Unstructured, error) {
	var (
		data []byte
		err  error
	)
	if path == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("no object in the input")
	}
	// YAML is a superset of JSON, so one conversion reads both.
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(js); err != nil {
		return nil, err
	}
	if !u.IsList() {
		return []*unstructured.Unstructured{u}, nil
	}
	list, err := u.ToList()
	if err != nil {
		return nil, err
	}
	out := make([]*unstructured.Unstructured, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	return out, nil
}

func printResult(format string, u *unstructured.Unstructured, res *status.Result) {
	if format == "text" {
		// One line per object: a message never spans lines here.
		fmt.Printf("%s\t%s\n", res.Status, strings.ReplaceAll(res.Message, "\n", " "))
		return
	}
	conds := res.Conditions
	if conds == nil {
		conds = []status.Condition{}
	}
	b, err := json.Marshal(output{
		Kind:       u.GetKind(),
		Name:       u.GetName(),
		Namespace:  u.GetNamespace(),
		Status:     res.Status.String(),
		Message:    res.Message,
		Conditions: conds,
	})
	if err != nil {
		fail("%v", err)
	}
	fmt.Println(string(b))
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "gro-kstatus: "+format+"\n", args...)
	os.Exit(2)
}
