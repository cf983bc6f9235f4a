package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"

	"github.com/sg-project/sg/services/auth"
	"github.com/sg-project/sg/subjects"
)

const authUsage = `init <dir> | add <dir> <name> [--role R] [--id DAP] | add-client <dir> <name> | rotate <dir> <name> | remove <dir> <name> | list <dir>`

func cmdAuth(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("auth", authUsage, `
Makes and manages sg's NATS credentials (README: Security). A credential directory
holds one nkey seed per user (<name>.nk, mode 0600), users.json (names, roles,
public keys) and nats-server.conf, which sg nats --auth, sg run --auth and a
standalone nats-server load.

  init <dir>                 a user per role: client, gw, rc, dap, agg, feed, demo, admin
  add <dir> <name> --role R  another user; a dap user with --id may speak for that DAP only
  add-client <dir> <name>    another caller (add --role client): its own inbox _INBOX.<name>
  rotate <dir> <name>        a new key for name; the old one stops at the server's reload
  remove <dir> <name>        revoke name
  list <dir>                 the users

After add, rotate or remove: send SIGHUP to sg nats (or nats-server --signal reload)
and hand the new <name>.nk to its owner.`, stdout, stderr)
	prefix := fs.String("prefix", envString(os.LookupEnv, envPrefix, subjects.DefaultPrefix), "init: subject prefix of the deployment (env SG_PREFIX)")
	role := fs.String("role", string(subjects.RoleClient), "add: role of the new user")
	id := fs.String("id", "", "add: with --role dap, the one DAP id the user may speak for")
	existOK := fs.Bool("exist-ok", false, "init: succeed without change when dir already holds credentials (an init step of a compose file)")
	pos, done, err := parseMixed(fs, args, stdout)
	if done {
		return err
	}
	if len(pos) < 2 {
		fs.Usage()
		return errors.New("want a verb and a directory")
	}
	verb, dir, rest := pos[0], pos[1], pos[2:]
	needName := func() (string, error) {
		if len(rest) != 1 {
			return "", fmt.Errorf("sg auth %s: want <dir> <name>", verb)
		}
		return rest[0], nil
	}
	switch verb {
	case "init":
		if len(rest) != 0 {
			return errors.New("sg auth init: want <dir> only")
		}
		if *existOK {
			if m, err := auth.Load(dir); err == nil {
				fmt.Fprintf(stdout, "sg auth: %s already holds %d users (prefix %s)\n", dir, len(m.Users), m.Prefix)
				return nil
			}
		}
		m, err := auth.Init(dir, *prefix)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "sg auth: %d users in %s (prefix %s); start the server with sg nats --auth %s\n", len(m.Users), dir, m.Prefix, dir)
	case "add", "add-client":
		name, err := needName()
		if err != nil {
			return err
		}
		r := subjects.Role(*role)
		if verb == "add-client" {
			r = subjects.RoleClient
		}
		u, err := auth.Add(dir, name, r, *id)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "sg auth: added %s (role %s, inbox %s): %s\n", u.Name, u.Role, u.InboxPrefix(), auth.SeedFile(dir, u.Name))
	case "rotate":
		name, err := needName()
		if err != nil {
			return err
		}
		u, err := auth.Rotate(dir, name)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "sg auth: new key for %s (%s); reload the server, then the old seed stops working\n", u.Name, u.NKey)
	case "remove":
		name, err := needName()
		if err != nil {
			return err
		}
		if err := auth.Remove(dir, name); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "sg auth: removed %s; reload the server\n", name)
	case "list":
		m, err := auth.Load(dir)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tROLE\tDAP ID\tINBOX PREFIX\tNKEY")
		for _, u := range m.Users {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", u.Name, u.Role, u.ID, u.InboxPrefix(), u.NKey)
		}
		return tw.Flush()
	default:
		fs.Usage()
		return fmt.Errorf("sg auth: unknown verb %q", verb)
	}
	return nil
}
