# bash completion for sbx. Installed to share/bash-completion/completions/sbx.
# The words come from sbx itself, so they cannot lag behind it: commands and
# each command's options and subcommands from `sbx help --words [CMD]` (the
# CLI's command table), box ids, image names and providers from `sbx ls -q`,
# `sbx image ls -q` and `sbx providers`.

_sbx()
{
    local cur prev words cword
    _init_completion -n : 2>/dev/null || {
        cur=${COMP_WORDS[COMP_CWORD]}; prev=${COMP_WORDS[COMP_CWORD-1]}
        words=("${COMP_WORDS[@]}"); cword=$COMP_CWORD
    }
    local sbx=${words[0]:-sbx} cmd="" i
    for ((i = 1; i < cword; i++)); do
        case ${words[i]} in -*) ;; *) cmd=${words[i]}; break ;; esac
    done
    if [ -z "$cmd" ]; then
        COMPREPLY=($(compgen -W "$("$sbx" help --words 2>/dev/null) --version --help" -- "$cur"))
        return
    fi
    # Values: what sbx can list; other options' values are the user's to type.
    case $prev in
        --provider)
            COMPREPLY=($(compgen -W "$("$sbx" providers 2>/dev/null)" -- "$cur")); return ;;
        --config|--spec|-f)
            COMPREPLY=($(compgen -f -- "$cur")); return ;;
        --image)
            COMPREPLY=($(compgen -W "none $("$sbx" image ls -q 2>/dev/null)" -- "$cur"))
            COMPREPLY+=($(compgen -f -- "$cur")); return ;;
        --workdir|--cwd|-w|--block|-e|--env|--cpu|--memory|--disk|--ttl|--ready-timeout|--port|\
        -p|--publish|--label|--file|--timeout|--user|-u|--run-id|--name|--output-limit|-v|\
        --volume|--cap-add|--shm-size|--network|--pull|--since|-n|--tail|-s|--signal|-c|\
        --change|--format|--platform|--max-bytes|-t)
            [ "$cmd" = logs ] && [ "$prev" = -t ] || return ;;
    esac
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$("$sbx" help --words "$cmd" 2>/dev/null)" -- "$cur"))
        return
    fi
    case $cmd in
        image|volume|network)
            local sub="" j
            for ((j = i + 1; j < cword; j++)); do
                case ${words[j]} in -*) ;; *) sub=${words[j]}; break ;; esac
            done
            if [ -z "$sub" ]; then
                COMPREPLY=($(compgen -W "$("$sbx" help --words "$cmd" 2>/dev/null | grep -v '^-')" -- "$cur"))
            elif [ "$cmd" = image ]; then
                case $sub in
                    import|build) COMPREPLY=($(compgen -f -- "$cur")) ;;
                    inspect|tag|rm) COMPREPLY=($(compgen -W "$("$sbx" image ls -q 2>/dev/null)" -- "$cur")) ;;
                esac
            fi ;;
        cp)
            COMPREPLY=($(compgen -W "$("$sbx" ls -q 2>/dev/null | sed 's/$/:/')" -- "$cur"))
            COMPREPLY+=($(compgen -f -- "$cur"))
            compopt -o nospace 2>/dev/null ;;
        run|create|ls|ps|gc|providers) ;;
        help)
            COMPREPLY=($(compgen -W "$("$sbx" help --words 2>/dev/null)" -- "$cur")) ;;
        *)
            # The other commands take a box first.
            COMPREPLY=($(compgen -W "$("$sbx" ls -q 2>/dev/null)" -- "$cur")) ;;
    esac
}
complete -F _sbx sbx
