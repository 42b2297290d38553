// =============================================================================

#include <mutex>
#include <queue>
#include <unordered_map>
#include <vector>

#ifndef HOROVOD_GROUP_TABLE_H
#define HOROVOD_GROUP_TABLE_H
