# OpenSSH (openssh-client, openssh-server): `ssh -I module` logs in with an ECDSA P-256 key on
# the token (ssh signs the session hash through CKM_ECDSA). The server is a private sshd on
# 127.0.0.1 on a free high port, with its own configuration, host key and authorized_keys taken
# from `ssh-keygen -D module`; it is stopped at the end. Independently: sshd (OpenSSH's own
# verification with libcrypto) accepts the login, the remote command's output comes back, and
# sshd's log names the token key's fingerprint.
. "$(dirname "$0")/common.sh"
need ssh ssh-keygen /usr/sbin/sshd timeout
d="$WORK/ssh"
mkdir -p "$d"
keygen 0a sshkey EC:prime256v1
ssh-keygen -D "$M" > "$d/authorized_keys"
grep -q "^ecdsa-sha2-nistp256 " "$d/authorized_keys" || { echo "FAIL: ssh-keygen -D: $(cat "$d/authorized_keys")" >&2; exit 1; }
fingerprint=$(ssh-keygen -lf "$d/authorized_keys" | awk '{print $2}')
ssh-keygen -q -t ed25519 -N '' -f "$d/host_key"
# Privilege separation needs this directory when sshd runs as root (CI); as another user sshd
# can only log that user in, which is who runs the client.
[ "$(id -u)" != 0 ] || mkdir -p /run/sshd
user=$(id -un)
sshd_pid=""
trap '[ -n "$sshd_pid" ] && kill "$sshd_pid" 2>/dev/null || true' EXIT
# A port taken by someone else makes sshd exit at once ("Cannot bind any address"): another.
# 40000-59999 stays clear of the PowerDNS scenario's ports (20000-39999), which may run alongside.
for _ in 1 2 3 4 5; do
    port=$((40000 + (RANDOM * 32768 + RANDOM) % 20000))
    cat > "$d/sshd_config" <<CONF
ListenAddress 127.0.0.1:$port
HostKey $d/host_key
PidFile $d/sshd.pid
AuthorizedKeysFile $d/authorized_keys
# $WORK lies under a world-writable /tmp, which StrictModes refuses.
StrictModes no
AuthenticationMethods publickey
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PermitRootLogin prohibit-password
LogLevel VERBOSE
CONF
    /usr/sbin/sshd -D -f "$d/sshd_config" -E "$d/sshd.log" &
    sshd_pid=$!
    # Up to 60 s: a busy machine starts sshd slowly, and a slow start is not a taken port.
    for _ in $(seq 1 600); do
        grep -q "Server listening on 127.0.0.1 port $port" "$d/sshd.log" 2>/dev/null && break 2
        kill -0 "$sshd_pid" 2>/dev/null || break
        sleep 0.1
    done
    kill "$sshd_pid" 2>/dev/null || true
    wait "$sshd_pid" 2>/dev/null || true
    sshd_pid=""
done
[ -n "$sshd_pid" ] || { echo "FAIL: sshd did not start: $(cat "$d/sshd.log")" >&2; exit 1; }
echo "[127.0.0.1]:$port $(cat "$d/host_key.pub")" > "$d/known_hosts"
# The PIN comes from SSH_ASKPASS (ssh has no terminal here). IdentityFile names a file that does
# not exist, so ssh offers no default key from ~/.ssh (IdentitiesOnly would drop the token's key
# as well); no agent either.
printf '#!/bin/sh\necho 1234\n' > "$d/askpass"
chmod 700 "$d/askpass"
out=$(env -u SSH_AUTH_SOCK SSH_ASKPASS="$d/askpass" SSH_ASKPASS_REQUIRE=force DISPLAY=none \
    timeout 60 ssh -I "$M" -F /dev/null -p "$port" -o IdentityFile="$d/no-key-file" \
    -o PreferredAuthentications=publickey -o UserKnownHostsFile="$d/known_hosts" \
    -o GlobalKnownHostsFile=/dev/null -o StrictHostKeyChecking=yes -o ConnectTimeout=10 \
    "$user@127.0.0.1" 'echo "ferrohsm ssh $((6 * 7))"' </dev/null 2>"$d/ssh.err") \
    || { echo "FAIL: ssh login: $(cat "$d/ssh.err"); sshd: $(cat "$d/sshd.log")" >&2; exit 1; }
[ "$out" = "ferrohsm ssh 42" ] || { echo "FAIL: the remote command printed: $out" >&2; exit 1; }
grep -q "Accepted publickey for $user from 127.0.0.1 .* ECDSA $fingerprint" "$d/sshd.log" \
    || { echo "FAIL: sshd did not log the token key $fingerprint: $(cat "$d/sshd.log")" >&2; exit 1; }
echo "e2e ssh: logged in with the token's ECDSA P-256 key, remote command ran"
