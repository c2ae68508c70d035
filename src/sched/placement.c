/*
 * placement.c -- the names of the placements (placement.h).
 */
#include "sched/placement.h"

#include <string.h>

static const char *const g_place_names[] = {"owner", "batch", "search"};

const char *rap_placement_name(rap_placement p)
{
    return (unsigned)p < 3 ? g_place_names[p] : "?";
}

int rap_placement_parse(const char *name)
{
    for (int i = 0; i < 3; i++)
        if (name && !strcmp(name, g_place_names[i]))
            return i;
    return -1;
}
