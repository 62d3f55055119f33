// Package deploy renders the kustomizations in this directory, in process and as
// `kubectl apply -k` would, for the tests that check them and apply them to an API server.
package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Kustomizations are the directories, relative to this one, that `kubectl apply -k` takes.
var Kustomizations = []string{"base", "overlays/local", "overlays/temporal-cloud", NamespacedKustomization}

// NamespacedKustomization is the overlay whose worker reaches Jobs, Pods and ConfigMaps only
// in JobNamespace (Roles there), with Nodes and Namespaces cluster-wide.
const (
	NamespacedKustomization = "overlays/namespaced"
	JobNamespace            = "node-maintenance"
)

// Dir is this directory (deploy/ of the source tree): where this file was compiled from, or,
// in a -trimpath build, the nearest deploy/ above the working directory.
func Dir() string {
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		return filepath.Dir(file)
	}
	dir, _ := os.Getwd()
	for {
		if _, err := os.Stat(filepath.Join(dir, "deploy", "base", "kustomization.yaml")); err == nil {
			return filepath.Join(dir, "deploy")
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "deploy"
		}
		dir = parent
	}
}

// Render builds one kustomization (a path relative to Dir, or absolute) into its objects,
// in kustomize's output order (Namespaces first).
func Render(kustomization string) ([]*unstructured.Unstructured, error) {
	dir := kustomization
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(Dir(), dir)
	}
	resources, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	var objs []*unstructured.Unstructured
	for _, r := range resources.Resources() {
		m, err := r.Map()
		if err != nil {
			return nil, fmt.Errorf("kustomize build %s: %s: %w", dir, r.CurId(), err)
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
	return objs, nil
}
