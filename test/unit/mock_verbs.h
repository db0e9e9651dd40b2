/* Mock of the thin verbs layer (lib/verbs.h) for unit tests. */
#ifndef EVR_MOCK_VERBS_H
#define EVR_MOCK_VERBS_H
#include "verbs.h"
#endif
