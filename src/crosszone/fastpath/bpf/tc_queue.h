/* Constants shared by the emulator's DSCP queue classifier (tc_dscp_class.c) and the tc classes
 * the emulator builds around it (crosszone_lab/emulate/queues.py mirrors them; a unit test checks). */
#ifndef CZ_TC_QUEUE_H
#define CZ_TC_QUEUE_H

/* The classifier names a class by the packet's DSCP: handle CZ_QUEUE_MAJOR:(CZ_QUEUE_DSCP_BASE +
 * DSCP). Only the DSCP values the policy uses get a class; htb sends a packet whose class does
 * not exist to its default class, so the DSCP -> class table lives in the tc classes, and the
 * program needs no map and no configuration. */
#define CZ_QUEUE_MAJOR      1
#define CZ_QUEUE_DSCP_BASE  0x100

#endif
