module gro-testbed/runner

go 1.26

require (
	code.gitea.io/actions-proto-go v0.4.1
	connectrpc.com/connect v1.15.0
	google.golang.org/protobuf v1.32.0
	gopkg.in/yaml.v3 v3.0.1
)
