// Command etcd is the etcd server, built here so the local stack gets the etcd
// version that the pinned Kubernetes release is tested against.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
