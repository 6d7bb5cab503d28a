// v3join: etcd 3.6/3.7's v3 discovery join (`--discovery-token`, `--discovery-endpoints`), as a
// small program over etcd 3.4's Go client (clientv3 from Debian's golang-etcd-server-dev), for
// muster-discovery's tests: the calls grpc-go makes are the calls a stock etcd member makes.
// Written for these tests from the protocol facts in spec/etcd-v3-discovery.md.
//
// Usage: v3join -endpoints URL[,URL] -token T -name N -peer URL [-cacert F] [-timeout 60s]
// [-user NAME -password PW] (etcd's --discovery-user and --discovery-password).
// Prints "cluster <name=url,...>" and exits 0, or prints etcd's discovery error and exits 1.
package main

import (
	"context"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io/ioutil"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/clientv3"
)

var (
	errSizeNotFound = errors.New("discovery: size key not found")
	errBadSizeKey   = errors.New("discovery: size key is bad")
	errFullCluster  = errors.New("discovery: cluster is full")
)

type member struct {
	key, value string
	createRev  int64
}

type joiner struct {
	c      *clientv3.Client
	token  string
	selfID string
	value  string
}

// memberID is etcd's: the first 8 bytes of SHA-1 over the sorted peer URLs and the token.
func memberID(peers []string, token string) string {
	sorted := append([]string(nil), peers...)
	sort.Strings(sorted)
	sum := sha1.Sum([]byte(strings.Join(sorted, "") + token))
	return strconv.FormatUint(binary.BigEndian.Uint64(sum[:8]), 16)
}

func (j *joiner) prefix() string { return "/_etcd/registry/" + j.token + "/members" }

// checkCluster: the size, the members, and the header revision of the members Range.
func (j *joiner) checkCluster(ctx context.Context) (int, map[string]member, int64, error) {
	resp, err := j.c.Get(ctx, "/_etcd/registry/"+j.token+"/_config/size")
	if err != nil {
		return 0, nil, 0, err
	}
	if len(resp.Kvs) == 0 {
		return 0, nil, 0, errSizeNotFound
	}
	size, err := strconv.Atoi(string(resp.Kvs[0].Value))
	if err != nil || size <= 0 {
		return 0, nil, 0, errBadSizeKey
	}
	resp, err = j.c.Get(ctx, j.prefix(), clientv3.WithPrefix())
	if err != nil {
		return 0, nil, 0, err
	}
	members := map[string]member{}
	for _, kv := range resp.Kvs {
		if strings.Contains(string(kv.Value), "=") {
			members[string(kv.Key)] = member{string(kv.Key), string(kv.Value), kv.CreateRevision}
		}
	}
	return size, members, resp.Header.Revision, nil
}

func firstN(members map[string]member, n int) []member {
	all := make([]member, 0, len(members))
	for _, m := range members {
		all = append(all, m)
	}
	sort.Slice(all, func(a, b int) bool { return all[a].createRev < all[b].createRev })
	if len(all) > n {
		all = all[:n]
	}
	return all
}

func contains(ms []member, key string) bool {
	for _, m := range ms {
		if m.key == key {
			return true
		}
	}
	return false
}

func (j *joiner) joinOnce(ctx context.Context) (string, error) {
	size, members, rev, err := j.checkCluster(ctx)
	if err != nil {
		return "", err
	}
	own := j.prefix() + "/" + j.selfID
	if len(members) >= size && !contains(firstN(members, size), own) {
		return "", errFullCluster
	}
	if _, err := j.c.Put(ctx, own, j.value); err != nil {
		return "", err
	}
	if _, members, _, err = j.checkCluster(ctx); err != nil {
		return "", err
	}
	for len(members) < size {
		// No deadline on the watch, as in etcd.
		wch := j.c.Watch(context.Background(), j.prefix(), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		for resp := range wch {
			if resp.Canceled || resp.CompactRevision != 0 {
				break
			}
			for _, ev := range resp.Events {
				if strings.Contains(string(ev.Kv.Value), "=") {
					members[string(ev.Kv.Key)] = member{string(ev.Kv.Key), string(ev.Kv.Value), ev.Kv.CreateRevision}
				}
			}
			if len(members) >= size {
				break
			}
		}
	}
	winners := firstN(members, size)
	if !contains(winners, own) {
		return "", errFullCluster
	}
	parts := make([]string, len(winners))
	for i, m := range winners {
		parts[i] = m.value
	}
	return strings.Join(parts, ","), nil
}

func main() {
	endpoints := flag.String("endpoints", "", "discovery endpoints")
	token := flag.String("token", "", "discovery token")
	name := flag.String("name", "", "member name")
	peer := flag.String("peer", "", "peer URL")
	cacert := flag.String("cacert", "", "CA bundle for https endpoints")
	timeout := flag.Duration("timeout", 60*time.Second, "give up after")
	user := flag.String("user", "", "discovery user (etcd's --discovery-user)")
	password := flag.String("password", "", "discovery password (etcd's --discovery-password)")
	flag.Parse()

	cfg := clientv3.Config{
		Endpoints:            strings.Split(*endpoints, ","),
		DialTimeout:          2 * time.Second,
		DialKeepAliveTime:    2 * time.Second,
		DialKeepAliveTimeout: 6 * time.Second,
		// As etcd's discovery sets them: clientv3 Authenticates at New when both are set.
		Username: *user,
		Password: *password,
	}
	if *cacert != "" {
		pem, err := ioutil.ReadFile(*cacert)
		if err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		cfg.TLS = &tls.Config{RootCAs: pool}
	}
	c, err := clientv3.New(cfg)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	defer c.Close()
	j := &joiner{c: c, token: *token, selfID: memberID([]string{*peer}, *token), value: *name + "=" + *peer}
	deadline := time.Now().Add(*timeout)
	backoff := 100 * time.Millisecond
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Until(deadline))
		cluster, err := j.joinOnce(ctx)
		cancel()
		switch {
		case err == nil:
			fmt.Println("cluster", cluster)
			return
		case err == errSizeNotFound || err == errBadSizeKey || err == errFullCluster:
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "retrying:", err)
		time.Sleep(backoff)
		if backoff < time.Second {
			backoff *= 2
		}
	}
	fmt.Println("error timed out")
	os.Exit(3)
}
