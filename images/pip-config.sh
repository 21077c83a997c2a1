# Sourced by the image builds: this machine's pip configuration, to hand to pip inside a
# build (a mirror, a local wheel directory or a private CA configured here works there).
# pip_paths prints the pip.conf files and the local directories the configuration names.
pip_paths() {
    local path
    for path in /etc/pip.conf /etc/xdg/pip; do
        [ -e "$path" ] && echo "$path"
    done
    for path in $(pip config list 2>/dev/null | grep -oE "(file://)?/[^' ]+" | sed 's|^file://||' | sort -u); do
        [ -d "$path" ] && echo "$path"
    done
    return 0
}
