#!/usr/bin/env python3
"""admin.py: set up the test Keystone (scripts/keystone/start.sh) for Placement and rtrack.

  admin.py [--admin-password-file FILE] AUTH_URL setup [PLACEMENT_URL]
  admin.py [--admin-password-file FILE] AUTH_URL placement-endpoint PLACEMENT_URL
  admin.py [--admin-password-file FILE] AUTH_URL new-app-cred NAME
  admin.py [--admin-password-file FILE] AUTH_URL delete-app-cred ID
  admin.py [--admin-password-file FILE] AUTH_URL catalog

AUTH_URL is what start.sh printed (http://127.0.0.1:PORT/v3). The admin password comes from
KEYSTONE_ADMIN_PASSWORD, else from FILE (start.sh keeps it in DIR/etc/admin-password).

setup (idempotent) creates project "service"; roles admin, service, reader, member unless
bootstrap made them; user "placement" (admin + service on project service: keystonemiddleware
validates tokens with it); user "rtrack" (only service on project service: Placement 16's
defaults allow every API rtrack calls to role admin or service with a project-scoped token, but
POST /reshaper to role service only, and refuse system-scoped tokens); with PLACEMENT_URL, the
placement service and its public, internal and admin endpoints in RegionOne; and a new
application credential "rtrack" of user rtrack (one from an earlier setup is deleted, and its
tokens stop working). It prints one JSON object: auth_url, admin_password, user, password, user_domain,
project, project_domain, placement_user, placement_password, app_cred_id, app_cred_name,
app_cred_secret.
The users' passwords are derived from the admin password (HMAC), so setup can run again and
other commands can act as rtrack without being handed its password.

placement-endpoint points the placement service's endpoints at PLACEMENT_URL (for a Placement
started after setup). new-app-cred prints {"app_cred_id", "app_cred_name", "app_cred_secret"}
(an existing one of that NAME is replaced). delete-app-cred deletes (revokes) rtrack's
application credential ID. catalog prints the catalog of a token of user admin on project admin.

Stdlib only (any python3), never through a proxy. Exit 0 on success, 1 on a failed request
(the message names the call and Keystone's answer), 2 on bad usage.
"""
import argparse
import hashlib
import hmac
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
DOMAIN = {"id": "default"}


class Fail(Exception):
    pass


def call(method, url, token=None, body=None, ok=(200, 201, 204)):
    """One request; returns (json or None, headers)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Accept", "application/json")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("X-Auth-Token", token)
    try:
        with OPENER.open(req, timeout=30) as r:
            status, raw, headers = r.status, r.read(), r.headers
    except urllib.error.HTTPError as e:
        status, raw, headers = e.code, e.read(), e.headers
    except OSError as e:
        raise Fail("%s %s: %s" % (method, url, e))
    if status not in ok:
        raise Fail("%s %s: HTTP %d %s" % (method, url, status, raw.decode(errors="replace")[:500]))
    return (json.loads(raw) if raw else None), headers


class Keystone:
    def __init__(self, url, admin_password):
        self.url = url.rstrip("/")
        self.admin_password = admin_password
        self._admin = None

    def password_of(self, user):
        key = self.admin_password.encode()
        return hmac.new(key, b"rtrack-test-user:" + user.encode(), hashlib.sha256).hexdigest()[:32]

    def token(self, user, password, scope):
        body = {"auth": {"identity": {"methods": ["password"], "password": {
            "user": {"name": user, "domain": DOMAIN, "password": password}}}}}
        if scope:
            body["auth"]["scope"] = scope
        answer, headers = call("POST", self.url + "/auth/tokens", body=body)
        return headers["X-Subject-Token"], answer["token"]

    @property
    def admin(self):
        # System scope: the admin APIs of keystone's default policy accept it everywhere.
        if self._admin is None:
            self._admin = self.token("admin", self.admin_password, {"system": {"all": True}})[0]
        return self._admin

    def get(self, path, token=None):
        return call("GET", self.url + path, token or self.admin)[0]

    def find(self, collection, **query):
        """The one entity of collection matching query, or None."""
        found = self.get("/%s?%s" % (collection, urllib.parse.urlencode(query)))[collection]
        return found[0] if found else None

    def ensure(self, collection, body, **query):
        """Find or create; returns the entity."""
        found = self.find(collection, **query)
        if found:
            return found
        single = collection[:-1]
        return call("POST", "%s/%s" % (self.url, collection), self.admin, {single: body})[0][single]

    def ensure_user(self, name, project_id):
        password = self.password_of(name)
        user = self.find("users", name=name, domain_id="default")
        if user is None:
            body = {"user": {"name": name, "domain_id": "default", "password": password,
                             "default_project_id": project_id}}
            user = call("POST", self.url + "/users", self.admin, body)[0]["user"]
        else:
            try:
                self.token(name, password, None)
            except Fail:  # the admin password changed since it was set
                call("PATCH", "%s/users/%s" % (self.url, user["id"]), self.admin, {"user": {"password": password}})
                # That revoked the user's tokens issued up to now, at one-second resolution.
                time.sleep(1.1)
        return user, password

    def grant(self, project_id, user_id, role_id):
        call("PUT", "%s/projects/%s/users/%s/roles/%s" % (self.url, project_id, user_id, role_id), self.admin)

    def rtrack_token(self):
        scope = {"project": {"name": "service", "domain": DOMAIN}}
        token, body = self.token("rtrack", self.password_of("rtrack"), scope)
        return token, body["user"]["id"]

    def new_app_cred(self, name):
        # Only the owner may create one, with a project-scoped token.
        token, user_id = self.rtrack_token()
        base = "%s/users/%s/application_credentials" % (self.url, user_id)
        query = "?" + urllib.parse.urlencode({"name": name})
        for old in call("GET", base + query, token)[0]["application_credentials"]:
            call("DELETE", base + "/" + old["id"], token)
        cred = call("POST", base, token, {"application_credential": {"name": name}})[0]["application_credential"]
        return {"app_cred_id": cred["id"], "app_cred_name": cred["name"], "app_cred_secret": cred["secret"]}

    def delete_app_cred(self, cred_id):
        token, user_id = self.rtrack_token()
        call("DELETE", "%s/users/%s/application_credentials/%s" % (self.url, user_id, cred_id), token)

    def placement_endpoint(self, placement_url):
        service = self.find("services", type="placement")
        if service is None:
            service = self.ensure("services", {"type": "placement", "name": "placement", "enabled": True},
                                  type="placement")
        have = {e["interface"]: e for e in
                self.get("/endpoints?service_id=%s" % service["id"])["endpoints"]}
        for interface in ("public", "internal", "admin"):
            body = {"endpoint": {"service_id": service["id"], "interface": interface,
                                 "url": placement_url, "region_id": "RegionOne", "enabled": True}}
            if interface in have:
                call("PATCH", "%s/endpoints/%s" % (self.url, have[interface]["id"]), self.admin, body)
            else:
                call("POST", self.url + "/endpoints", self.admin, body)

    def setup(self, placement_url):
        project = self.ensure("projects", {"name": "service", "domain_id": "default",
                                           "description": "services of the rtrack test cloud"},
                              name="service", domain_id="default")
        roles = {name: self.ensure("roles", {"name": name}, name=name)["id"]
                 for name in ("admin", "service", "reader", "member")}
        placement, placement_password = self.ensure_user("placement", project["id"])
        for role in ("admin", "service"):
            self.grant(project["id"], placement["id"], roles[role])
        rtrack, rtrack_password = self.ensure_user("rtrack", project["id"])
        self.grant(project["id"], rtrack["id"], roles["service"])
        if placement_url:
            self.placement_endpoint(placement_url)
        out = {"auth_url": self.url, "admin_password": self.admin_password,
               "user": "rtrack", "password": rtrack_password, "user_domain": "Default",
               "project": "service", "project_domain": "Default",
               "placement_user": "placement", "placement_password": placement_password}
        out.update(self.new_app_cred("rtrack"))
        return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--admin-password-file")
    p.add_argument("auth_url")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("setup").add_argument("placement_url", nargs="?")
    sub.add_parser("placement-endpoint").add_argument("placement_url")
    sub.add_parser("new-app-cred").add_argument("name")
    sub.add_parser("delete-app-cred").add_argument("id")
    sub.add_parser("catalog")
    args = p.parse_args()

    password = os.environ.get("KEYSTONE_ADMIN_PASSWORD")
    if not password and args.admin_password_file:
        try:
            with open(args.admin_password_file) as f:
                password = f.readline().strip()
        except OSError as e:
            p.error("cannot read the admin password: %s" % e)
    if not password:
        p.error("set KEYSTONE_ADMIN_PASSWORD or give --admin-password-file")
    ks = Keystone(args.auth_url, password)
    try:
        if args.cmd == "setup":
            out = ks.setup(args.placement_url)
        elif args.cmd == "placement-endpoint":
            ks.placement_endpoint(args.placement_url)
            out = None
        elif args.cmd == "new-app-cred":
            out = ks.new_app_cred(args.name)
        elif args.cmd == "delete-app-cred":
            ks.delete_app_cred(args.id)
            out = None
        else:
            # GET /auth/catalog refuses system-scoped tokens: log in to project admin.
            out = ks.token("admin", password, {"project": {"name": "admin", "domain": DOMAIN}})[1]["catalog"]
    except Fail as e:
        print("keystone/admin: error: %s" % e, file=sys.stderr)
        return 1
    if out is not None:
        json.dump(out, sys.stdout, indent=1 if args.cmd == "catalog" else None)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
