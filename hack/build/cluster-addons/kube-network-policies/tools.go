//go:build tools

// Package tools names the commands hack/build/cluster-addons.sh builds, so go mod tidy pins their modules.
package tools

import (
	_ "sigs.k8s.io/kube-network-policies/cmd"
)
