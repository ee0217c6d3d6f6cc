"""`python -m rollout mode=hybrid` — see conf/config.yaml for every option."""

from rollout.quick_exit import exit_with


def _main() -> int:
    # Imported once the quick exit's handler is registered, so that Ray's own exit handler runs before it.
    from rollout.run.app import main

    return main()


exit_with(_main)
