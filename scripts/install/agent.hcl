# csi-agent's configuration, read by csi-agent.service.
#
# `make install` writes this file only when there is none, so your changes
# survive upgrades. Check a change with
#     csi-agent validate /etc/csi-agent/agent.hcl
# and apply it with `systemctl reload csi-agent` (SIGHUP): plugins are
# added, changed and removed at once; a new data_dir takes effect at the
# next start. Lines starting with # are comments; every value below that is
# not commented out is the default.

# Where the agent keeps its state (state.pb and its journal), its control
# socket (control.sock, root only), plugin sockets, and the staging and
# publish directories of claimed volumes.
data_dir = "/var/lib/csi-agent"

# This node's name. Leave it out to use the host name.
# node_name = "node-1"

# off, error, warn, info, debug or trace. Secrets are never logged.
log_level = "info"

# How often each plugin is fingerprinted and probed.
plugin_heartbeat = "30s"

# The deadline of each volume RPC (stage, publish, ...); a call that takes
# longer is retried.
rpc_timeout = "2m"

# One block per CSI plugin that runs outside the agent (started by systemd,
# say). type is "controller", "node" or "monolith" (both). The socket path
# may be written with or without unix://.
#
# plugin "hostpath" {
#   socket         = "unix:///run/csi/hostpath.sock"
#   type           = "monolith"
#   health_timeout = "30s"
# }

# Host directories that jobs may mount with `type = "host"` volumes.
#
# host_volume "certs" {
#   path      = "/etc/ssl/certs"
#   read_only = true
# }

# Prometheus metrics at GET /metrics (docs/metrics.md), off by default.
# listen is ip:port or the absolute path of a unix socket.
#
# telemetry {
#   prometheus_metrics = true
#   listen             = "127.0.0.1:9108"
# }

# Docker's Volume Plugin protocol (docs/docker-volumes.md), off by default:
# docker volume create -d csi ..., docker run -v NAME:/data, compose, podman.
#
# volume_plugin {
#   name          = "csi"        # socket /run/docker/plugins/csi.sock
#   plugin_id     = "hostpath"   # the CSI plugin of a Create without -o plugin_id
#   mount_timeout = "25s"        # under dockerd's 30s plugin timeout
# }
