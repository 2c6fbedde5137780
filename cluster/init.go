package cluster

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/pelletier/go-toml/v2"

	"idlepool/identity"
)

// ConfigFile is the name of a node's configuration file in its
// directory.
const ConfigFile = "cluster.toml"

// PoolKeyFile is where a node keeps the pool's key, relative to its data
// directory: the coordinator key every node signs receipts with.
const PoolKeyFile = "coord/coordinator.key"

// InitNode names one node for Init: its name and the addresses of its
// HTTP API and of its routes (HOST:PORT; HOST must be how the other nodes
// and the agents reach it).
type InitNode struct {
	Name        string
	Listen      string
	RouteListen string
}

// Init makes the files of a new cluster under dir: for every node,
// dir/NAME/ with cluster.toml (routes to every other node), the cluster's
// CA certificate ca.pem, the node's certificate node.pem and key
// node-key.pem (ECDSA P-256, signed by the CA, valid 10 years for the
// node's route host, client and server use), and the pool's key under
// data/coord/coordinator.key — one Ed25519 key shared by the nodes, so
// that receipts from any node verify against one pool key. The route
// credentials (a random 32-byte password) are in every cluster.toml. The
// CA's private key is not kept: adding a node means running Init again
// for the whole cluster. Every file is written with mode 0600 and every
// directory 0700. Init refuses a dir that already has a node directory
// of the same name (ErrNodeDirExists), and names that are not plain
// distinct names (ErrConfig). shards is how many shards the pool's work
// is divided into (NodeConfig.Shards; 0 means 1), written into every
// node's config: it is fixed for the pool's life. It returns the
// configs it wrote.
func Init(dir, poolName string, shards int, nodes []InitNode) ([]NodeConfig, error) {
	if len(nodes) == 0 {
		return nil, fmt.Errorf("%w: no nodes", ErrConfig)
	}
	if shards == 0 {
		shards = 1
	}
	if ValidateShardCount(shards) != nil {
		return nil, fmt.Errorf("%w: shards %d: want 1 to %d", ErrConfig, shards, MaxShards)
	}
	seen := map[string]bool{}
	for _, n := range nodes {
		if n.Name == "" || n.Name != filepath.Base(n.Name) || seen[n.Name] {
			return nil, fmt.Errorf("%w: node name %q: want a distinct plain name such as node1", ErrConfig, n.Name)
		}
		seen[n.Name] = true
		if _, err := os.Stat(filepath.Join(dir, n.Name)); err == nil {
			return nil, fmt.Errorf("%w: %s; remove it or choose another directory", ErrNodeDirExists, filepath.Join(dir, n.Name))
		}
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "idlepool cluster CA " + poolName},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(10, 0, 0), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	caCert, _ := x509.ParseCertificate(caDER)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	var poolKey []byte // the key file's bytes, made on the first node
	var pw [32]byte
	if _, err := io.ReadFull(rand.Reader, pw[:]); err != nil {
		return nil, err
	}
	password := base64.RawURLEncoding.EncodeToString(pw[:])
	var cfgs []NodeConfig
	for _, n := range nodes {
		cfg := NodeConfig{Name: n.Name, Pool: poolName, Listen: n.Listen, RouteListen: n.RouteListen,
			RouteUser: "idlepool-node", RoutePassword: password, CA: "ca.pem", Cert: "node.pem", Key: "node-key.pem",
			Shards: shards, Dir: filepath.Join(dir, n.Name)}
		for _, o := range nodes {
			if o.Name != n.Name {
				cfg.Routes = append(cfg.Routes, o.RouteListen)
			}
		}
		if len(nodes) >= 3 {
			cfg.Replicas = 3
		} else {
			cfg.Replicas = len(nodes)
		}
		c, err := cfg.withDefaults()
		if err != nil {
			return nil, err
		}
		host, _, _ := net.SplitHostPort(n.RouteListen)
		certPEM, keyPEM, err := nodeCert(caCert, caKey, n.Name, host, now)
		if err != nil {
			return nil, err
		}
		var conf bytes.Buffer
		fmt.Fprintf(&conf, "# idlepool cluster node %s: run it with idlepool serve --cluster %s\n", n.Name, filepath.Join(cfg.Dir, ConfigFile))
		out := c // with its defaults, written out so the operator sees them
		out.DataDir = "data"
		enc := toml.NewEncoder(&conf)
		if err := enc.Encode(out); err != nil {
			return nil, err
		}
		files := map[string][]byte{ConfigFile: conf.Bytes(), "ca.pem": caPEM, "node.pem": certPEM, "node-key.pem": keyPEM}
		if err := os.MkdirAll(filepath.Join(c.DataDir, filepath.Dir(PoolKeyFile)), 0o700); err != nil {
			return nil, err
		}
		for name, data := range files {
			if err := os.WriteFile(filepath.Join(cfg.Dir, name), data, 0o600); err != nil {
				return nil, err
			}
		}
		kp := filepath.Join(c.DataDir, PoolKeyFile)
		if poolKey == nil {
			if _, err := identity.LoadOrCreate(kp); err != nil {
				return nil, fmt.Errorf("make the pool key: %w", err)
			}
			if poolKey, err = os.ReadFile(kp); err != nil {
				return nil, err
			}
		} else if err := os.WriteFile(kp, poolKey, 0o600); err != nil {
			return nil, fmt.Errorf("write the pool key for %s: %w", n.Name, err)
		}
		cfgs = append(cfgs, c)
	}
	return cfgs, nil
}

// LoadConfig reads a node's cluster.toml; unknown keys are an error, and
// so is a config that cannot work (ErrConfig, naming the field).
func LoadConfig(path string) (NodeConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return NodeConfig{}, fmt.Errorf("read cluster config: %w", err)
	}
	var c NodeConfig
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return NodeConfig{}, fmt.Errorf("%w: %s: %v", ErrConfig, path, err)
	}
	abs, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return NodeConfig{}, err
	}
	c.Dir = abs
	c, err = c.withDefaults()
	if err != nil {
		return c, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	return n
}

func nodeCert(ca *x509.Certificate, caKey *ecdsa.PrivateKey, name, host string, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: name},
		NotBefore: now.Add(-time.Hour), NotAfter: now.AddDate(10, 0, 0),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:    []string{name, "localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
	} else if host != "" {
		tmpl.DNSNames = append(tmpl.DNSNames, host)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), nil
}
