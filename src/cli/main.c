/* main.c -- the rap command (placeholder until the CLI lands). */
#include "rap.h"

#include <stdio.h>

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "rap: no subcommand yet\n");
    return 2;
}
