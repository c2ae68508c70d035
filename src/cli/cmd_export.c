/* cmd_export.c -- rap export: a checkpoint's model weights alone, as a
 * safetensors file PyTorch loads (docs/CHECKPOINT.md). */
#include "cli/cli.h"
#include "run/checkpoint_meta.h"

#include <string.h>
#include <sys/stat.h>

int cmd_export(int argc, char **argv)
{
    cli_settings s;
    cli_parse("export", CMD_EXPORT, argc, argv, &s);
    if (!s.checkpoint[0] || !s.out[0]) {
        fprintf(stderr, "rap export: give --checkpoint CKPT (or --resume CKPT) and --out FILE\n");
        return 2;
    }
    /* the training position and optimizer state stay behind */
    rap_status st = rap_ckpt_export(s.checkpoint, s.out, rap_ckpt_position_keys);
    if (st != RAP_OK)
        return cli_fail("export", st);
    struct stat sb;
    long long bytes = stat(s.out, &sb) == 0 ? (long long)sb.st_size : -1;
    if (!s.quiet)
        fprintf(stderr, "rap export: wrote %s (%.1f MB): the model weights of %s\n", s.out,
            (double)bytes / 1e6, s.checkpoint);
    return 0;
}
