/* The agent's state (section 1 of agent.h): one definition of each variable declared there. */
#include "agent.h"

const char *DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
const char *DEFAULT_HOME = "HOME=/root";
struct exec *execs;
struct fread *reads;
struct fwrite *writes;
struct flist *lists;
struct helper *helpers;
struct buf out;             /* lines for the host, not yet written */
struct buf inb;             /* host bytes not yet parsed into lines */
int in_discarding;          /* inside an over-long line: drop bytes up to the next '\n' */
int last_sent_nl = 1;       /* the last byte written to the host ended a line */
const char *device_path;    /* --device PATH, else NULL: the channel is fd 0/1 */
int chan_in = -1, chan_out = -1;
int chan_in_nonblock;
int chan_heard;             /* device mode: bytes arrived since the device was (re)opened */
int64_t chan_retry_at;      /* device mode: when to reopen a lost device */
int64_t in_paused_until;    /* stdio mode as PID 1: host input hit EOF, look again then */
int am_pid1;
int sig_fd = -1;
int quiesce_pending, quiesced;
uint64_t next_id = 1;       /* one more than the highest request id seen */
unsigned tmp_counter;
char **base_env;            /* K=V strings given to every command, request env merged over */
size_t base_envc;
unsigned char iobuf[CHUNK]; /* scratch for one chunk of child output or file data */
