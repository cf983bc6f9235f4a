// Package auth makes and loads sg's NATS credentials (`sg auth`): one nkey
// user per role (subjects.Roles), each with the subject permissions of its
// role (subjects.Permissions), in one account.
//
// A credential directory holds:
//
//	users.json         the users: name, role, optional DAP id, public nkey (no secrets)
//	<name>.nk          the user's nkey seed, mode 0600, with its inbox prefix in a comment
//	nats-server.conf   the authorization block a nats-server loads (sg nats --auth, sg run
//	                   --auth, or a standalone nats-server -c nats-server.conf)
//
// The server only ever holds public keys: a seed never leaves its file, and
// the server authenticates a connection by its signature of a nonce.
package auth

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/sg-project/sg/subjects"
)

// Files of a credential directory.
const (
	ManifestFile = "users.json"
	ConfFile     = "nats-server.conf"
	SeedExt      = ".nk"
)

// inboxLine starts the comment line of a seed file that names the
// credential's inbox prefix; ConnectOptions reads it.
const inboxLine = "# inbox-prefix: "

// User is one credential.
type User struct {
	Name string        `json:"name"`         // unique in the directory; a subject token
	Role subjects.Role `json:"role"`         // what it may do
	ID   string        `json:"id,omitempty"` // a dap credential restricted to this DAP id
	NKey string        `json:"nkey"`         // public user nkey (U...)
}

// Grant is the user's identity for subjects.Permissions.
func (u User) Grant() subjects.Grant { return subjects.Grant{Role: u.Role, Name: u.Name, ID: u.ID} }

// InboxPrefix is the user's inbox prefix (nats.CustomInboxPrefix).
func (u User) InboxPrefix() string { return subjects.InboxPrefix(u.Role, u.Name) }

// Manifest is the content of users.json.
type Manifest struct {
	Prefix string `json:"prefix"` // the deployment's subject prefix
	Users  []User `json:"users"`
}

// SeedFile is the path of user name's seed in dir.
func SeedFile(dir, name string) string { return filepath.Join(dir, name+SeedExt) }

// ClientSeedBeside is the client credential that Init made in the directory
// of seedFile (a service's credential), or "" if there is none. A GW under
// authentication takes its async jobs' answers on it, as a client: a GW
// answers caller inboxes only, and its own credential's is a service inbox.
func ClientSeedBeside(seedFile string) string {
	if seedFile == "" {
		return ""
	}
	p := SeedFile(filepath.Dir(seedFile), string(subjects.RoleClient))
	if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
		return ""
	}
	return p
}

// Init creates dir with one user per role, named after the role, and the
// server config. It refuses a directory that already has users.
func Init(dir, prefix string) (Manifest, error) {
	s, err := subjects.New(prefix)
	if err != nil {
		return Manifest{}, err
	}
	if _, err := os.Stat(filepath.Join(dir, ManifestFile)); err == nil {
		return Manifest{}, fmt.Errorf("%s already holds credentials (%s); use add or rotate", dir, ManifestFile)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Manifest{}, fmt.Errorf("auth: %w", err)
	}
	m := Manifest{Prefix: s.Prefix()}
	for _, r := range subjects.Roles {
		if _, err := m.add(dir, User{Name: string(r), Role: r}); err != nil {
			return Manifest{}, err
		}
	}
	return m, m.save(dir)
}

// Add adds a user (a client per caller, a per-DAP credential, ...) with a
// new seed, and rewrites the server config.
func Add(dir, name string, role subjects.Role, id string) (User, error) {
	m, err := Load(dir)
	if err != nil {
		return User{}, err
	}
	if m.find(name) >= 0 {
		return User{}, fmt.Errorf("auth: user %q exists in %s; rotate it or choose another name", name, dir)
	}
	u, err := m.add(dir, User{Name: name, Role: role, ID: id})
	if err != nil {
		return User{}, err
	}
	return u, m.save(dir)
}

// Rotate gives user name a new key: its seed file is replaced and the server
// config lists the new public key only, so the old seed stops working as soon
// as the server reloads its config.
func Rotate(dir, name string) (User, error) {
	m, err := Load(dir)
	if err != nil {
		return User{}, err
	}
	i := m.find(name)
	if i < 0 {
		return User{}, fmt.Errorf("auth: no user %q in %s", name, dir)
	}
	pub, err := writeSeed(dir, m.Users[i])
	if err != nil {
		return User{}, err
	}
	m.Users[i].NKey = pub
	return m.Users[i], m.save(dir)
}

// Remove revokes user name: it leaves the server config and its seed file is deleted.
func Remove(dir, name string) error {
	m, err := Load(dir)
	if err != nil {
		return err
	}
	i := m.find(name)
	if i < 0 {
		return fmt.Errorf("auth: no user %q in %s", name, dir)
	}
	m.Users = slices.Delete(m.Users, i, i+1)
	if err := m.save(dir); err != nil {
		return err
	}
	if err := os.Remove(SeedFile(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("auth: %w", err)
	}
	return nil
}

// Load reads users.json of dir.
func Load(dir string) (Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return Manifest{}, fmt.Errorf("auth: %w (create it with sg auth init)", err)
	}
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return Manifest{}, fmt.Errorf("auth: %s: %w", filepath.Join(dir, ManifestFile), err)
	}
	if _, err := m.NkeyUsers(); err != nil {
		return Manifest{}, fmt.Errorf("auth: %s: %w", filepath.Join(dir, ManifestFile), err)
	}
	return m, nil
}

func (m *Manifest) find(name string) int {
	return slices.IndexFunc(m.Users, func(u User) bool { return u.Name == name })
}

// add makes u's seed and appends u; the caller saves.
func (m *Manifest) add(dir string, u User) (User, error) {
	s, err := subjects.New(m.Prefix)
	if err != nil {
		return User{}, err
	}
	if !validName(u.Name) {
		return User{}, fmt.Errorf("auth: user name %q: want 1 to %d of A-Z a-z 0-9 _ - (it names a file and an inbox)", u.Name, subjects.MaxTokenLen)
	}
	if _, err := s.Permissions(u.Grant()); err != nil {
		return User{}, fmt.Errorf("auth: user %q: %w", u.Name, err)
	}
	if u.NKey, err = writeSeed(dir, u); err != nil {
		return User{}, err
	}
	m.Users = append(m.Users, u)
	return u, nil
}

// validName: a user name is a file name and an inbox token, so only the
// characters that are safe in both.
func validName(name string) bool {
	if name == "" || len(name) > subjects.MaxTokenLen {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// writeSeed makes a new user key and writes its seed (0600), returning the public key.
func writeSeed(dir string, u User) (string, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return "", fmt.Errorf("auth: create nkey: %w", err)
	}
	defer kp.Wipe()
	seed, err := kp.Seed()
	if err != nil {
		return "", fmt.Errorf("auth: %w", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return "", fmt.Errorf("auth: %w", err)
	}
	who := string(u.Role)
	if u.ID != "" {
		who += ", DAP " + u.ID + " only"
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# sg NATS credential %q (role %s); keep it secret.\n", u.Name, who)
	fmt.Fprintf(&b, "# Use: sg <command> --creds %s (or SG_NATS_CREDS); nats CLI: --nkey, --inbox-prefix.\n", u.Name+SeedExt)
	fmt.Fprintf(&b, "%s%s\n%s\n", inboxLine, u.InboxPrefix(), seed)
	if err := writeFile(SeedFile(dir, u.Name), b.Bytes(), 0o600); err != nil {
		return "", err
	}
	return pub, nil
}

// save writes users.json and the server config.
func (m Manifest) save(dir string) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	conf, err := m.Conf()
	if err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, ManifestFile), append(b, '\n'), 0o600); err != nil {
		return err
	}
	return writeFile(filepath.Join(dir, ConfFile), conf, 0o600)
}

// writeFile replaces path atomically, so a server reloading its config never
// reads half a file.
func writeFile(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename: nothing left to remove
	err = tmp.Chmod(mode)
	if err == nil {
		_, err = tmp.Write(data)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("auth: write %s: %w", path, err)
	}
	return nil
}

// NkeyUsers are the server-side users of m: public key and permissions.
func (m Manifest) NkeyUsers() ([]*server.NkeyUser, error) {
	s, err := subjects.New(m.Prefix)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []*server.NkeyUser
	for _, u := range m.Users {
		if seen[u.Name] || seen[u.NKey] {
			return nil, fmt.Errorf("user %q: duplicate name or key", u.Name)
		}
		seen[u.Name], seen[u.NKey] = true, true
		if !nkeys.IsValidPublicUserKey(u.NKey) {
			return nil, fmt.Errorf("user %q: %q is not a public user nkey", u.Name, u.NKey)
		}
		p, err := s.Permissions(u.Grant())
		if err != nil {
			return nil, fmt.Errorf("user %q: %w", u.Name, err)
		}
		out = append(out, &server.NkeyUser{Nkey: u.NKey, Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: p.Publish},
			Subscribe: &server.SubjectPermission{Allow: p.Subscribe},
		}})
	}
	return out, nil
}

// Conf is the nats-server authorization block of m.
func (m Manifest) Conf() ([]byte, error) {
	users, err := m.NkeyUsers()
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# sg NATS authorization, subject prefix %q. Generated by `sg auth` from users.json:\n", m.Prefix)
	b.WriteString("# change users with sg auth add|rotate|remove, not here. Load it with\n")
	b.WriteString("# sg nats --auth <dir>, or nats-server -js -c nats-server.conf (then nats-server --signal reload).\n")
	b.WriteString("authorization {\n  users = [\n")
	for i, u := range users {
		fmt.Fprintf(&b, "    # %s (role %s)\n", m.Users[i].Name, m.Users[i].Role)
		fmt.Fprintf(&b, "    {nkey: %s, permissions: {\n      publish: {allow: %s}\n      subscribe: {allow: %s}\n    }}\n",
			strconv.Quote(u.Nkey), quoteList(u.Permissions.Publish.Allow), quoteList(u.Permissions.Subscribe.Allow))
	}
	b.WriteString("  ]\n}\n")
	return b.Bytes(), nil
}

func quoteList(l []string) string {
	q := make([]string, len(l))
	for i, s := range l {
		q[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// LoadConf reads the users of a nats-server config file (ConfFile): what
// `sg nats --auth` and `sg run --auth` enforce, parsed by nats-server itself
// so that they and a standalone server cannot disagree.
func LoadConf(path string) ([]*server.NkeyUser, error) {
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	if len(opts.Nkeys) == 0 {
		return nil, fmt.Errorf("auth: %s defines no nkey users", path)
	}
	return opts.Nkeys, nil
}

// ConnectOptions are the connection options of a credential file: a seed
// file made by sg auth (its nkey, and its inbox prefix) or a NATS .creds file
// (user JWT and seed, for operator-mode deployments).
func ConnectOptions(path string) ([]nats.Option, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	if bytes.Contains(b, []byte("BEGIN NATS USER JWT")) {
		return []nats.Option{nats.UserCredentials(path)}, nil
	}
	nk, err := nats.NkeyOptionFromSeed(path)
	if err != nil {
		return nil, fmt.Errorf("credentials %s: %w", path, err)
	}
	opts := []nats.Option{nk}
	if p := InboxPrefixOf(b); p != "" {
		opts = append(opts, nats.CustomInboxPrefix(p))
	}
	return opts, nil
}

// InboxPrefixOf reads the inbox prefix that sg auth wrote into a seed file ("" if none).
func InboxPrefixOf(seedFile []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(seedFile))
	for sc.Scan() {
		if p, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), inboxLine); ok {
			return strings.TrimSpace(p)
		}
	}
	return ""
}
