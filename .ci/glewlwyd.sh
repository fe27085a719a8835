#!/usr/bin/env bash
# A real OIDC provider for the identity tests: Debian's glewlwyd, on
# loopback, with SQLite, stood up from nothing in a state directory.
#
#   glewlwyd.sh start DIR            install if missing, configure, start; writes DIR/env
#   glewlwyd.sh token DIR USER PASS  prints an access token (password grant)
#   glewlwyd.sh rotate DIR           signs with a new ES256 key (published with a
#                                    short coordinate), the old one still published
#   glewlwyd.sh stop DIR             stops it (the state stays)
#   glewlwyd.sh restart DIR          starts it again on the same state
#
# What it sets up: an `oidc` plugin signing RS256 with the key `rsa-1`,
# the scope `changegate` (access tokens carry it as `aud`), a confidential
# client allowed the password grant, and two users whose `groups` go into
# access tokens as a claim (glewlwyd's "additional token values", which
# joins several values with commas): alice (platform-admins, developers)
# and bob (developers).
set -euo pipefail

die() { echo "glewlwyd.sh: $*" >&2; exit 1; }

command="${1:-}"
dir="${2:-}"
[ -n "$command" ] && [ -n "$dir" ] || die "usage: glewlwyd.sh start|token|rotate|stop|restart DIR"

CLIENT_ID=changegate-ci
CLIENT_SECRET=changegate-ci-secret
SCOPE=changegate

install_glewlwyd() {
    [ -x /usr/bin/glewlwyd ] && [ -x /usr/bin/rnbyc ] && [ -x /usr/bin/sqlite3 ] && [ -x /usr/bin/openssl ] && return
    echo "installing glewlwyd" >&2
    export DEBIAN_FRONTEND=noninteractive
    # Without these the package's postinst fails, or goes for a local PostgreSQL.
    debconf-set-selections <<'EOF'
glewlwyd glewlwyd/config_type select No configuration
glewlwyd glewlwyd/dbconfig-install boolean false
EOF
    apt-get install -y -qq glewlwyd dbconfig-no-thanks rnbyc sqlite3 openssl >/dev/null 2>&1 || {
        apt-get update -qq
        apt-get install -y -qq glewlwyd dbconfig-no-thanks rnbyc sqlite3 openssl >/dev/null
    }
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

base() { echo "http://127.0.0.1:$(cat "$dir/port")"; }

# Starts the server on DIR's configuration and waits until it answers.
launch() {
    glewlwyd --config-file="$dir/glewlwyd.conf" >>"$dir/glewlwyd.log" 2>&1 &
    echo $! >"$dir/pid"
    for _ in $(seq 1 100); do
        if [ "$(curl -s -o /dev/null -w '%{http_code}' "$(base)/api/mod/type/")" != 000 ]; then
            return
        fi
        kill -0 "$(cat "$dir/pid")" 2>/dev/null || die "glewlwyd exited: $(tail -5 "$dir/glewlwyd.log")"
        sleep 0.1
    done
    die "glewlwyd does not answer on $(base)"
}

admin_login() {
    curl -sf -c "$dir/admin.cookies" -H 'content-type: application/json' \
        -d '{"username":"admin","password":"password"}' "$(base)/api/auth/" >/dev/null \
        || die "admin login refused"
}

# An admin API call: METHOD PATH [JSON]; fails on an answer other than 2xx.
admin() {
    local method="$1" path="$2" body="${3:-}"
    local args=(-s -b "$dir/admin.cookies" -X "$method" -o "$dir/last-answer" -w '%{http_code}')
    [ -n "$body" ] && args+=(-H 'content-type: application/json' --data-binary "$body")
    local status
    status="$(curl "${args[@]}" "$(base)/api$path")"
    case "$status" in
        2*) ;;
        *) die "$method $path answered $status: $(cat "$dir/last-answer") $(tail -3 "$dir/glewlwyd.log")" ;;
    esac
}

# A private JWKS of one key made from a PEM: kid, alg, pem. (rnbyc names
# neither when it parses a key, and the plugin needs both.)
jwks_of() {
    rnbyc -j -f "$3" -n 0 | python3 -c '
import json, sys
jwks = json.load(sys.stdin)
for key in jwks["keys"]:
    key.update(kid=sys.argv[1], alg=sys.argv[2])
print(json.dumps(jwks))' "$1" "$2" | tee "$dir/$1.jwks"
}

plugin_json() {
    local jwks="$1" kid="$2"
    JWKS="$jwks" KID="$kid" ISSUER="$(base)/api/oidc" python3 - <<'EOF'
import json, os
print(json.dumps({
    "module": "oidc", "name": "oidc", "display_name": "OIDC", "enabled": True,
    "parameters": {
        "iss": os.environ["ISSUER"],
        "jwks-private": os.environ["JWKS"], "default-kid": os.environ["KID"],
        "jwt-type": "rsa", "jwt-key-size": "256", "jwks-show": True,
        "access-token-duration": 3600, "refresh-token-duration": 1209600,
        "code-duration": 600, "refresh-token-rolling": True, "allow-non-oidc": True,
        "auth-type-code-enabled": True, "auth-type-token-enabled": True,
        "auth-type-id-token-enabled": True, "auth-type-none-enabled": True,
        "auth-type-password-enabled": True, "auth-type-client-enabled": True,
        "auth-type-device-enabled": False, "auth-type-refresh-enabled": True,
        "subject-type": "public", "claims": [], "scope": [],
        "additional-parameters": [
            {"user-parameter": "groups", "token-parameter": "groups"},
            {"user-parameter": "username", "token-parameter": "username"},
        ],
    },
}))
EOF
}

start() {
    install_glewlwyd
    mkdir -p "$dir"
    [ -f "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null && die "already running in $dir"
    local port
    port="$(free_port)"
    echo "$port" >"$dir/port"
    zcat /usr/share/doc/glewlwyd/database/init.sqlite3.sql.gz | sqlite3 "$dir/glewlwyd.db"
    zcat /usr/share/doc/glewlwyd/glewlwyd.conf.sample.gz | sed \
        -e "s|^port=.*|port=$port|" \
        -e "s|^external_url=.*|external_url=\"http://127.0.0.1:$port\"|" \
        -e 's|^cookie_domain=.*|cookie_domain="127.0.0.1"|' \
        -e 's|^cookie_secure=.*|cookie_secure=0|' \
        -e 's|^log_level=.*|log_level="WARNING"|' \
        -e "s|path = \"/var/cache/glewlwyd/glewlwyd.db\"|path = \"$dir/glewlwyd.db\"|" \
        >"$dir/glewlwyd.conf"
    launch
    admin_login

    # Keys as PEM too: the tests forge tokens with them (an expired one
    # signed with the real key, HS256 with the public key as the secret).
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$dir/rsa-private.pem" 2>/dev/null
    openssl pkey -in "$dir/rsa-private.pem" -pubout -out "$dir/rsa-public.pem"
    admin POST /mod/plugin/ "$(plugin_json "$(jwks_of rsa-1 RS256 "$dir/rsa-private.pem")" rsa-1)"

    admin POST /scope/ "{\"name\":\"$SCOPE\",\"display_name\":\"changegate\",\"description\":\"changegate API\",\"password_required\":false,\"password_max_age\":0,\"scheme\":{}}"
    # Users get a multi-valued `groups` property.
    admin GET /mod/user/database
    admin PUT /mod/user/database "$(python3 -c '
import json, sys
module = json.load(open(sys.argv[1]))
module["parameters"]["data-format"]["groups"] = {
    "multiple": True, "read": True, "write": True, "profile-read": True, "profile-write": False}
print(json.dumps(module))' "$dir/last-answer")"
    admin PUT /mod/user/database/reset
    admin POST /user/ "{\"username\":\"alice\",\"name\":\"Alice\",\"email\":\"alice@example.com\",\"password\":\"alice-password\",\"scope\":[\"openid\",\"$SCOPE\"],\"enabled\":true,\"groups\":[\"platform-admins\",\"developers\"]}"
    admin POST /user/ "{\"username\":\"bob\",\"name\":\"Bob\",\"email\":\"bob@example.com\",\"password\":\"bob-password\",\"scope\":[\"openid\",\"$SCOPE\"],\"enabled\":true,\"groups\":[\"developers\"]}"
    # The OIDC plugin checks a confidential client's secret only with a
    # token_endpoint_auth_method; without one the password grant fails.
    admin POST /client/ "{\"client_id\":\"$CLIENT_ID\",\"password\":\"$CLIENT_SECRET\",\"name\":\"changegate CI\",\"confidential\":true,\"redirect_uri\":[\"http://127.0.0.1/\"],\"authorization_type\":[\"password\",\"refresh_token\"],\"token_endpoint_auth_method\":[\"client_secret_basic\"],\"scope\":[\"openid\",\"$SCOPE\"],\"enabled\":true}"

    local b
    b="$(base)"
    cat >"$dir/env" <<EOF
OIDC_ISSUER=$b/api/oidc
OIDC_DISCOVERY_URL=$b/api/oidc/.well-known/openid-configuration
OIDC_JWKS_URL=$b/api/oidc/jwks
OIDC_TOKEN_URL=$b/api/oidc/token
OIDC_CLIENT_ID=$CLIENT_ID
OIDC_CLIENT_SECRET=$CLIENT_SECRET
OIDC_SCOPE=$SCOPE
OIDC_AUDIENCE=$SCOPE
OIDC_USERNAME_CLAIM=username
OIDC_GROUPS_CLAIM=groups
EOF
    # The first token proves the whole chain before any test relies on it.
    token alice alice-password >/dev/null
    echo "glewlwyd answers on $b (state in $dir)" >&2
}

token() {
    local user="$1" password="$2"
    curl -sf -u "$CLIENT_ID:$CLIENT_SECRET" \
        --data-urlencode grant_type=password --data-urlencode "username=$user" \
        --data-urlencode "password=$password" --data-urlencode "scope=$SCOPE" \
        "$(base)/api/oidc/token" -o "$dir/token-answer" || die "no token for $user: $(tail -3 "$dir/glewlwyd.log")"
    python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["access_token"])' "$dir/token-answer"
}

rotate() {
    admin_login
    # A key whose public y coordinate starts with a zero byte: rnbyc leaves
    # that byte out of the JWK, and glewlwyd publishes it so, as it would
    # for about one key in a hundred it generated itself.
    cp "$(dirname "$0")/../tests/fixtures/jwt_es256_short_coordinate_private.pem" "$dir/ec-private.pem"
    jwks_of ec-2 ES256 "$dir/ec-private.pem" >/dev/null
    local both
    both="$(python3 -c '
import json, sys
keys = [k for path in sys.argv[1:] for k in json.load(open(path))["keys"]]
print(json.dumps({"keys": keys}))' "$dir/ec-2.jwks" "$dir/rsa-1.jwks")"
    admin GET /mod/plugin/oidc
    local updated
    updated="$(JWKS="$both" python3 -c '
import json, os, sys
plugin = json.load(open(sys.argv[1]))
plugin["parameters"]["jwks-private"] = os.environ["JWKS"]
plugin["parameters"]["default-kid"] = "ec-2"
plugin["parameters"]["jwt-type"] = "ecdsa"
print(json.dumps(plugin))' "$dir/last-answer")"
    admin PUT /mod/plugin/oidc "$updated"
    # The update alone changes nothing: the plugin reads its keys on reset.
    admin PUT /mod/plugin/oidc/reset
}

stop() {
    [ -f "$dir/pid" ] || return 0
    local pid
    pid="$(cat "$dir/pid")"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$dir/pid"
}

case "$command" in
    start) start ;;
    token) token "${3:?user}" "${4:?password}" ;;
    rotate) rotate ;;
    stop) stop ;;
    restart) launch ;;
    *) die "unknown command $command" ;;
esac
