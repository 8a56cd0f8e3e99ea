//go:build tools

// Package tools names the commands build-k8s-bins.sh builds, so go mod tidy pins their modules.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
)
