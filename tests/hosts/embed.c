/* An application that embeds Tcl, as EDA tools do: it runs a Tcl script
 * file and ends by returning from main, without Tcl_Exit or Tcl_Finalize.
 * Built by tests/test_hosts.py:  embed script.tcl */
#include <stdio.h>
#include <tcl.h>

int
main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: embed script.tcl\n");
        return 2;
    }
    Tcl_FindExecutable(argv[0]);
    Tcl_Interp *interp = Tcl_CreateInterp();
    if (Tcl_Init(interp) != TCL_OK || Tcl_EvalFile(interp, argv[1]) != TCL_OK) {
        fprintf(stderr, "%s\n", Tcl_GetVar(interp, "errorInfo", TCL_GLOBAL_ONLY));
        return 1;
    }
    Tcl_DeleteInterp(interp);
    return 0;
}
