#!/bin/sh
# smoke.sh: bring the 3-node compose cluster up, make calls, kill a node,
# make calls again, restart it, and tear everything down (volumes too).
#
#   deploy/compose/smoke.sh            (from anywhere; needs docker compose v2)
#   KEEP=1 deploy/compose/smoke.sh     (leave the cluster running at the end)
#
# Exit status 0 when every step passed. Each call is made from inside a
# node with the admin identity and the demo mandate the node wrote; a call
# that fails while the cluster elects a new leader is retried as a new
# call (a retry of TASK_CREATE may create the task twice; the smoke test
# does not count them).
set -eu

cd "$(dirname "$0")"
export COMPOSE_FILE="$PWD/compose.yaml"

step() { printf '\n== %s\n' "$*"; }

teardown() {
	if [ "${KEEP:-}" = 1 ]; then
		echo "KEEP=1: the cluster keeps running; stop it with: docker compose -f $COMPOSE_FILE down -v"
		return
	fi
	step "tear down"
	docker compose down -v --remove-orphans
}
trap teardown EXIT

# wait_healthy SERVICE...: until every container of each service reports
# healthy (at most 3 minutes).
wait_healthy() {
	for svc in "$@"; do
		i=0
		while :; do
			ids=$(docker compose ps -q "$svc")
			ok=1
			[ -n "$ids" ] || ok=0
			for id in $ids; do
				[ "$(docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{end}}' "$id")" = healthy ] || ok=0
			done
			[ "$ok" = 1 ] && break
			i=$((i + 1))
			if [ "$i" -ge 90 ]; then
				echo "smoke: $svc not healthy after 3 minutes" >&2
				docker compose ps >&2
				docker compose logs --tail 50 "$svc" >&2
				exit 1
			fi
			sleep 2
		done
		echo "$svc healthy"
	done
}

# retry N CMD...: run CMD until it succeeds, at most N times, 3 s apart.
retry() {
	n=$1
	shift
	i=1
	until "$@"; do
		if [ "$i" -ge "$n" ]; then
			echo "smoke: failed $n times: $*" >&2
			exit 1
		fi
		i=$((i + 1))
		echo "(retrying in 3 s)"
		sleep 3
	done
}

step "build and start: init, n1 n2 n3, 2 x worker atlas.tasks, worker atp"
docker compose up -d --build
wait_healthy n1 n2 n3 tasks atp

step "call echo (the cluster may still be electing its leaders: up to 20 tries)"
retry 20 docker compose exec -T n1 utpmesh call echo --args '{"smoke":1}' --turn smoke-turn --nats nats://n1:4222,nats://n2:4222,nats://n3:4222 --creds /shared/creds/admin.nk --mandate /data/demo-mandate.jwt --wait-timeout 60s

step "create a task and list it (the atlas.tasks workers share one replicated bucket)"
retry 5 docker compose exec -T n1 utpmesh call TASK_CREATE --args '{"title":"smoke task"}' --turn smoke-turn --nats nats://n1:4222,nats://n2:4222,nats://n3:4222 --creds /shared/creds/admin.nk --mandate /data/demo-mandate.jwt --wait-timeout 60s
retry 5 docker compose exec -T n1 utpmesh call TASK_LIST --turn smoke-turn --nats nats://n1:4222,nats://n2:4222,nats://n3:4222 --creds /shared/creds/admin.nk --mandate /data/demo-mandate.jwt --wait-timeout 60s

step "kill n2 (SIGKILL)"
docker compose kill n2

step "call echo with n2 down (a new stream leader may take ~8 s: up to 10 tries)"
retry 10 docker compose exec -T n1 utpmesh call echo --args '{"smoke":2}' --turn smoke-turn --nats nats://n1:4222,nats://n2:4222,nats://n3:4222 --creds /shared/creds/admin.nk --mandate /data/demo-mandate.jwt --wait-timeout 60s

step "restart n2; it catches up"
docker compose start n2
wait_healthy n2
retry 10 docker compose exec -T n2 utpmesh call echo --args '{"smoke":3}' --turn smoke-turn --nats nats://n2:4222 --creds /shared/creds/admin.nk --mandate /data/demo-mandate.jwt --wait-timeout 60s

step "the turn, rebuilt from its cards"
docker compose exec -T n1 utpmesh turns show smoke-turn --nats nats://n1:4222,nats://n2:4222,nats://n3:4222 --creds /shared/creds/admin.nk

step "smoke test passed"
