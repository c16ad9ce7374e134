package main

import "testing"

func TestParseLabel(t *testing.T) {
	for in, want := range map[string]Label{
		"linux":                   {Name: "linux", Schema: "host"},
		"linux:host":              {Name: "linux", Schema: "host"},
		"ubuntu:docker://node:20": {Name: "ubuntu", Schema: "docker", Arg: "node:20"},
	} {
		got, err := ParseLabel(in)
		if err != nil || got != want {
			t.Errorf("ParseLabel(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for in, msg := range map[string]string{
		"app:infra":                "unsupported schema: infra",
		"k8s:kubernetes://busybox": "unsupported schema: kubernetes",
	} {
		if _, err := ParseLabel(in); err == nil || err.Error() != msg {
			t.Errorf("ParseLabel(%q) error = %v; want %q", in, err, msg)
		}
	}
}
