#!/usr/bin/env bash
# Start or stop the private Redis and RabbitMQ servers Corral needs, under one state dir.
#   scripts/servers.sh start STATE_DIR REDIS_PORT AMQP_PORT
#   scripts/servers.sh stop  STATE_DIR
#   scripts/servers.sh start-postgres STATE_DIR PORT   (prints a SQLAlchemy URL)
#   scripts/servers.sh start-redis STATE_DIR PORT      (Redis alone; prints its URL)
#   scripts/servers.sh stop-redis  STATE_DIR           (returns once it has exited)
#   scripts/servers.sh start-rabbitmq STATE_DIR PORT   (RabbitMQ alone; prints its URL)
#   scripts/servers.sh stop-rabbitmq  STATE_DIR        (returns once the broker has exited)
#   scripts/servers.sh stop-postgres  STATE_DIR
#   scripts/servers.sh rabbitmqctl STATE_DIR ARGS...  (the broker's own CLI, with its ports)
# (The -redis/-rabbitmq/-postgres pairs restart one server under a running platform: its data stays.)
# Redis persists: an append-only file fsynced every second (at most ~1 s of writes lost to a
# crash) in STATE_DIR/redis (0700), replayed when it starts again on the same dir.
# RabbitMQ runs as its own node (own name, ports, epmd, mnesia dir) so it never touches a
# system-wide broker; epmd outlives rabbitmqctl stop, so it is stopped by pid. A broker on
# AMQP_PORT takes the ten ports AMQP_PORT..+9: epmd +1, Erlang distribution +2, its CLI tools'
# own distribution +3..+9 (RabbitMQ's default, 35672-35682, is one range for every broker on
# the host and lies in the kernel's ephemeral range, where any outgoing connection may hold it).
set -euo pipefail
cmd=$1 state=$(realpath -m "$2")
redis_port=${3:-6379} amqp_port=${4:-5672}
node="corral-${amqp_port}@localhost"

rabbit_env() {
  export HOME="$state/rabbitmq" RABBITMQ_NODENAME="$node" RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
    RABBITMQ_NODE_PORT="$amqp_port" RABBITMQ_DIST_PORT=$((amqp_port + 2)) ERL_EPMD_ADDRESS=127.0.0.1 \
    ERL_EPMD_PORT=$((amqp_port + 1)) RABBITMQ_MNESIA_BASE="$state/rabbitmq/mnesia" \
    RABBITMQ_CTL_DIST_PORT_MIN=$((amqp_port + 3)) RABBITMQ_CTL_DIST_PORT_MAX=$((amqp_port + 9)) \
    RABBITMQ_LOG_BASE="$state/rabbitmq/log" RABBITMQ_PID_FILE="$state/rabbitmq/rabbitmq.pid" \
    RABBITMQ_ENABLED_PLUGINS_FILE="$state/rabbitmq/enabled_plugins" RABBITMQ_CONFIG_FILE="$state/rabbitmq/rabbitmq"
  # Erlang distribution (the broker's and the CLI tools' own) on loopback too: it listens on
  # every address otherwise. No plugin is enabled (enabled_plugins is "[]."): no management UI.
  export RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" \
    RABBITMQ_CTL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
}

redis_up() { [ "$(redis-cli -p "$1" ping 2>/dev/null)" = PONG ]; }  # not while it replays its AOF (LOADING)

start_redis() {
  mkdir -p "$state/redis" && chmod 700 "$state/redis"
  if ! redis-cli -p "$1" ping >/dev/null 2>&1; then
    redis-server --daemonize yes --bind 127.0.0.1 --port "$1" --save '' \
      --appendonly yes --appendfsync everysec --aof-use-rdb-preamble yes --databases 64 \
      --pidfile "$state/redis/redis.pid" --logfile "$state/redis/redis.log" --dir "$state/redis"
  fi
}

stop_redis() {
  [ -f "$state/redis/redis.pid" ] || return 0
  pid=$(cat "$state/redis/redis.pid")
  kill "$pid" 2>/dev/null || true  # SIGTERM: Redis fsyncs its AOF and exits
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  rm -f "$state/redis/redis.pid"
}

start_rabbitmq() {
  mkdir -p "$state/rabbitmq"
  rabbit_env
  echo "$amqp_port" > "$state/rabbitmq/port"
  [ -f "$state/rabbitmq/enabled_plugins" ] || echo "[]." > "$state/rabbitmq/enabled_plugins"
  # Let a test kill a consumer and see its unacked messages go back quickly.
  [ -f "$state/rabbitmq/rabbitmq.conf" ] || printf 'consumer_timeout = 3600000\nloopback_users = none\n' > "$state/rabbitmq/rabbitmq.conf"
  if ! /usr/lib/rabbitmq/bin/rabbitmqctl -n "$node" status >/dev/null 2>&1; then
    (cd "$state/rabbitmq" && /usr/lib/rabbitmq/bin/rabbitmq-server -detached)  # erl_crash.dump lands in cwd
  fi
  # await_startup gives up at once while the node is not yet registered with epmd: poll first.
  for _ in $(seq 60); do /usr/lib/rabbitmq/bin/rabbitmqctl -n "$node" -q ping >/dev/null 2>&1 && break; sleep 0.2; done
  /usr/lib/rabbitmq/bin/rabbitmqctl -n "$node" await_startup --timeout 90 >/dev/null
}

stop_rabbitmq() {
  if [ -f "$state/rabbitmq/port" ]; then
    amqp_port=$(cat "$state/rabbitmq/port"); node="corral-${amqp_port}@localhost"; rabbit_env
    beam=$(cat "$state/rabbitmq/rabbitmq.pid" 2>/dev/null || true)
    /usr/lib/rabbitmq/bin/rabbitmqctl -n "$node" stop >/dev/null 2>&1 || true
    [ -n "$beam" ] && kill -9 "$beam" 2>/dev/null || true
    # epmd is started with its port in the environment, not on its command line: find it by socket.
    for pid in $(ss -Hltnp "sport = :$((amqp_port + 1))" 2>/dev/null | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u); do
      kill "$pid" 2>/dev/null || true
    done
    rm -f "$state/rabbitmq/port"
  fi
}

stop_postgres() {
  if [ -f "$state/postgres/data/postmaster.pid" ]; then
    bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
    runuser -u postgres -- "$bin/pg_ctl" -D "$state/postgres/data" -m fast -w stop >/dev/null 2>&1 || true
  fi
}

case "$cmd" in
start)
  start_redis "$redis_port"
  start_rabbitmq
  for _ in $(seq 300); do redis_up "$redis_port" && break; sleep 0.1; done
  echo "redis://127.0.0.1:${redis_port}/0 amqp://guest:guest@127.0.0.1:${amqp_port}/"
  ;;
stop)
  stop_postgres
  stop_redis
  stop_rabbitmq
  ;;
start-redis)
  start_redis "$redis_port"
  for _ in $(seq 300); do redis_up "$redis_port" && break; sleep 0.1; done
  echo "redis://127.0.0.1:${redis_port}/0"
  ;;
stop-redis)
  stop_redis
  ;;
start-postgres)
  # A private cluster owned by the postgres user (initdb refuses root), trust auth on loopback.
  pg_port=${3:-55432}
  bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  mkdir -p "$state/postgres" && chown postgres: "$state/postgres"
  if [ ! -f "$state/postgres/data/PG_VERSION" ]; then
    runuser -u postgres -- "$bin/initdb" -D "$state/postgres/data" -A trust -U postgres >/dev/null
  fi
  if ! runuser -u postgres -- "$bin/pg_ctl" -D "$state/postgres/data" status >/dev/null 2>&1; then
    runuser -u postgres -- "$bin/pg_ctl" -D "$state/postgres/data" -l "$state/postgres/log" -w -t 60 \
      -o "-p $pg_port -k $state/postgres -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null
  fi
  echo "postgresql+psycopg://postgres@127.0.0.1:${pg_port}/postgres"
  ;;
start-rabbitmq)
  amqp_port=${3:?port}; node="corral-${amqp_port}@localhost"
  start_rabbitmq
  echo "amqp://guest:guest@127.0.0.1:${amqp_port}/"
  ;;
stop-rabbitmq)
  stop_rabbitmq
  ;;
stop-postgres)
  stop_postgres
  ;;
rabbitmqctl)
  amqp_port=$(cat "$state/rabbitmq/port"); node="corral-${amqp_port}@localhost"; rabbit_env
  shift 2
  exec /usr/lib/rabbitmq/bin/rabbitmqctl -n "$node" "$@"
  ;;
*) echo "usage: $0 start|stop|start-postgres|stop-postgres|start-redis|stop-redis|start-rabbitmq|stop-rabbitmq|rabbitmqctl STATE_DIR [PORTS|ARGS]" >&2; exit 2 ;;
esac
