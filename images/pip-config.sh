# Sourced by the image builds: this machine's pip configuration, to hand to pip inside a
# build (a mirror, a local wheel directory or a private CA configured here works there).
# pip_paths prints the pip.conf files and the local directories the configuration names;
# operator_client/image/pip_config.py is the one implementation (kctl-train build uses it).
pip_paths() {
    python3 "$(dirname "${BASH_SOURCE[0]}")/../operator_client/image/pip_config.py"
}
