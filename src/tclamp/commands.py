"""Registration: every declared torch:: command, under both its names."""

from . import aten, autocast, info, module_rules, precision, scaler, trace


def all_commands():
    return (autocast.COMMANDS + trace.COMMANDS + module_rules.COMMANDS + precision.COMMANDS
            + scaler.COMMANDS)


def register(interp):
    # Autocast switched on outside a scoped block has no end at which a
    # weight-cast cache could safely be dropped, so this thread casts
    # afresh there; scoped blocks turn the cache on for their duration.
    autocast.TORCH.set_autocast_cache_enabled(False)
    for command in all_commands():
        parser = aten.with_programs(command.parser())
        handle_form = command.handle_form()
        for name in dict.fromkeys((command.name, command.camel)):
            interp.create_command(f"::torch::{name}", parser, planned=True,
                                  script=command.takes_script, handle_form=handle_form)
    # So that `namespace import torch::*` brings them all in.
    interp.call("namespace", "eval", "::torch", "namespace", "export",
                *dict.fromkeys(name for command in all_commands()
                               for name in (command.name, command.camel)))
    interp.create_command("::tclamp::info", info.COMMAND.parser(), planned=True)
