package activities

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"go.temporal.io/sdk/temporal"

	"github.com/noderollout/noderollout/activities/jobspec"
	"github.com/noderollout/noderollout/api"
)

// Stored templates: a rollout's template is kept once in the cluster, in an immutable
// ConfigMap named after its content hash, so workflow histories carry the hash alone however
// large the template and however many nodes. The name carries the whole SHA-256, and every read
// checks the content against it: whoever may create ConfigMaps in the namespace cannot plant
// another template under the name.
const (
	templateConfigMapPrefix = "noderollout-template-"
	// LabelTemplateHash marks stored templates (kubectl get cm -l noderollout.io/template-hash);
	// its value is the hash's first 10 characters (a label value holds at most 63), for
	// people: the name holds the whole hash.
	LabelTemplateHash = "noderollout.io/template-hash"
	// storedTemplatesCached bounds the templates a worker keeps in memory.
	storedTemplatesCached = 32
)

// TemplateConfigMapName is where the template with this hash is stored. A rollout from before
// the whole hash stored its template under its 10-character hash, and reads it there.
func TemplateConfigMapName(hash string) string { return templateConfigMapPrefix + hash }

// storeTemplate keeps text in the namespace under its hash. The ConfigMap is immutable, so
// the content behind a hash never changes; an existing one is checked, not trusted.
func (a *Activities) storeTemplate(ctx context.Context, namespace, text, hash string) error {
	immutable := true
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:      TemplateConfigMapName(hash),
			Namespace: namespace,
			Labels:    map[string]string{LabelTemplateHash: hash[:min(len(hash), jobspec.LegacyTemplateHashLen)]},
		},
		Data:      map[string]string{DefaultTemplateKey: text},
		Immutable: &immutable,
	}
	_, err := a.Kube.CoreV1().ConfigMaps(namespace).Create(ctx, cm, metav1.CreateOptions{FieldManager: FieldManager})
	if err == nil || !apierrors.IsAlreadyExists(err) {
		return kubeError(err, "create", fmt.Sprintf("configmaps in namespace %q", namespace))
	}
	_, err = a.readStoredTemplate(ctx, namespace, hash)
	return err
}

// storedTemplate returns the template stored under hash, from memory when this worker has
// read it before.
func (a *Activities) storedTemplate(ctx context.Context, namespace, hash string) (string, error) {
	key := namespace + "/" + hash
	if text, ok := a.templates.get(key); ok {
		return text, nil
	}
	text, err := a.readStoredTemplate(ctx, namespace, hash)
	if err != nil {
		return "", err
	}
	a.templates.put(key, text)
	return text, nil
}

func (a *Activities) readStoredTemplate(ctx context.Context, namespace, hash string) (string, error) {
	name := TemplateConfigMapName(hash)
	cm, err := a.Kube.CoreV1().ConfigMaps(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", invalidRequest("jobTemplate", "the stored template ConfigMap %s/%s was deleted while the rollout ran; start the rollout again", namespace, name)
	}
	if err != nil {
		return "", kubeError(err, "get", fmt.Sprintf("configmap %s/%s", namespace, name))
	}
	text, ok := cm.Data[DefaultTemplateKey]
	if !ok || !jobspec.TemplateHashMatches(text, hash) {
		return "", temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("configmap %s/%s does not hold the template with hash %s; delete it and start the rollout again", namespace, name, hash),
			api.ErrForeignObject, nil)
	}
	return text, nil
}

// templateCache is a small map of stored templates; when full it forgets everything, which
// costs one GET per template in use.
type templateCache struct {
	mu    sync.Mutex
	texts map[string]string
}

func (c *templateCache) get(key string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	text, ok := c.texts[key]
	return text, ok
}

func (c *templateCache) put(key, text string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.texts == nil || len(c.texts) >= storedTemplatesCached {
		c.texts = map[string]string{}
	}
	c.texts[key] = text
}
