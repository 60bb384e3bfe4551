# bash completion for sbx. Installed to share/bash-completion/completions/sbx.
# Box ids, image names and providers come from sbx itself (ls -q, image ls -q, providers).

_sbx_box_opts='--provider --config --block --spec --image --workdir -e --env --cpu --memory
  --disk --ttl --ready-timeout --port -p --publish --label --file --help'

_sbx()
{
    local cur prev words cword
    _init_completion -n : 2>/dev/null || {
        cur=${COMP_WORDS[COMP_CWORD]}; prev=${COMP_WORDS[COMP_CWORD-1]}
        words=("${COMP_WORDS[@]}"); cword=$COMP_CWORD
    }
    local cmd="" i
    for ((i = 1; i < cword; i++)); do
        case ${words[i]} in -*) ;; *) cmd=${words[i]}; break ;; esac
    done
    if [ -z "$cmd" ]; then
        COMPREPLY=($(compgen -W 'run create exec shell attach cp ls status stop gc image providers help
          endpoint port-forward --version --help' -- "$cur"))
        return
    fi
    case $prev in
        --provider)
            COMPREPLY=($(compgen -W "$(sbx providers 2>/dev/null)" -- "$cur")); return ;;
        --config|--spec)
            COMPREPLY=($(compgen -f -- "$cur")); return ;;
        --image)
            COMPREPLY=($(compgen -W "none $(sbx image ls -q 2>/dev/null)" -- "$cur"))
            COMPREPLY+=($(compgen -f -- "$cur")); return ;;
        --workdir|--cwd|--block|-e|--env|--cpu|--memory|--disk|--ttl|--ready-timeout|--port|-p|--publish|\
        --label|--file|--timeout|--user|--run-id)
            return ;;
    esac
    case $cmd in
        run)
            COMPREPLY=($(compgen -W "$_sbx_box_opts --timeout --user --no-stdin --json -i -t" -- "$cur")) ;;
        create)
            COMPREPLY=($(compgen -W "$_sbx_box_opts --json" -- "$cur")) ;;
        exec)
            if [[ $cur == -* ]]; then
                COMPREPLY=($(compgen -W '-i -t --cwd -e --env --user --timeout --no-stdin --json --help' -- "$cur"))
            else
                COMPREPLY=($(compgen -W "$(sbx ls -q 2>/dev/null)" -- "$cur"))
            fi ;;
        shell|attach|endpoint|port-forward)
            [[ $cur == -* ]] || COMPREPLY=($(compgen -W "$(sbx ls -q 2>/dev/null)" -- "$cur")) ;;
        status|stop)
            if [[ $cur == -* ]]; then
                COMPREPLY=($(compgen -W '--json --force --help' -- "$cur"))
            else
                COMPREPLY=($(compgen -W "$(sbx ls -q 2>/dev/null)" -- "$cur"))
            fi ;;
        cp)
            COMPREPLY=($(compgen -W "-a $(sbx ls -q 2>/dev/null | sed 's/$/:/')" -- "$cur"))
            COMPREPLY+=($(compgen -f -- "$cur"))
            compopt -o nospace 2>/dev/null ;;
        ls)
            COMPREPLY=($(compgen -W '--label -q --quiet --json --help' -- "$cur")) ;;
        gc)
            COMPREPLY=($(compgen -W '--dry-run --label --run-id --json --help' -- "$cur")) ;;
        image)
            local sub="" j
            for ((j = i + 1; j < cword; j++)); do
                case ${words[j]} in -*) ;; *) sub=${words[j]}; break ;; esac
            done
            case $sub in
                "") COMPREPLY=($(compgen -W 'import ls inspect tag rm prune --help' -- "$cur")) ;;
                import) COMPREPLY=($(compgen -W '--progress --json' -- "$cur"))
                        COMPREPLY+=($(compgen -f -- "$cur")) ;;
                ls) COMPREPLY=($(compgen -W '-q --json --format' -- "$cur")) ;;
                prune) COMPREPLY=($(compgen -W '--dry-run' -- "$cur")) ;;
                inspect|tag) COMPREPLY=($(compgen -W "$(sbx image ls -q 2>/dev/null)" -- "$cur")) ;;
                rm) COMPREPLY=($(compgen -W "--force $(sbx image ls -q 2>/dev/null)" -- "$cur")) ;;
            esac ;;
        providers)
            COMPREPLY=($(compgen -W '--json --help' -- "$cur")) ;;
        help)
            COMPREPLY=($(compgen -W 'run create exec shell attach cp ls status stop gc image providers endpoint port-forward' -- "$cur")) ;;
    esac
}
complete -F _sbx sbx
