/*
 * A stand-in libnvidia-ml.so.1 for gputui's tests and benchmarks.
 *
 * It exports the NVML C symbols that the real `nvidia-ml-py` bindings (pynvml)
 * call for a GPU monitor, with the same signatures and struct layouts, and
 * simulates a box of NVIDIA H100s whose readings move over time. Behaviour is
 * configured by FAKE_NVML_* environment variables read at every nvmlInit*; see
 * README.md next to this file for the knobs.
 *
 * Any exported function can be left out of the build with
 * -DFAKE_NVML_OMIT_<symbol>, so the bindings answer FunctionNotFound for it as
 * they do on a driver older than themselves.
 *
 * Test hooks (not NVML):
 *   long long fake_nvml_call_count(const char *function)      calls since init, all GPUs
 *   long long fake_nvml_gpu_call_count(const char *function, int gpu)
 *                                                             calls on one GPU (-1: system)
 *   long long fake_nvml_device_queries(int gpu)               device queries on that GPU
 * Each returns -1 for an unknown function name or GPU index.
 *   long long fake_nvml_last_seen_timestamp(int gpu)          lastSeenTimeStamp the GPU's last
 *                                                             nvmlDeviceGetProcessUtilization got
 *   long long fake_nvml_calls_inside(void)                    calls sleeping inside now
 *   void fake_nvml_release_hangs(void)                        end every FAKE_NVML_HANG sleep
 */

#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <signal.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

/* ------------------------------------------------------------------------ */
/* NVML types, as in nvml.h (only what is exported here).                   */
/* ------------------------------------------------------------------------ */

typedef int nvmlReturn_t;
enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_ALREADY_INITIALIZED = 5,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_INSUFFICIENT_POWER = 8,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_IRQ_ISSUE = 11,
    NVML_ERROR_LIBRARY_NOT_FOUND = 12,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_CORRUPTED_INFOROM = 14,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_RESET_REQUIRED = 16,
    NVML_ERROR_OPERATING_SYSTEM = 17,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    NVML_ERROR_IN_USE = 19,
    NVML_ERROR_MEMORY = 20,
    NVML_ERROR_NO_DATA = 21,
    NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
    NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
    NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_DEPRECATED = 26,
    NVML_ERROR_NOT_READY = 27,
    NVML_ERROR_GPU_NOT_FOUND = 28,
    NVML_ERROR_INVALID_STATE = 29,
    NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30,
    NVML_ERROR_UNKNOWN = 999,
};

enum { NVML_CLOCK_GRAPHICS = 0, NVML_CLOCK_SM = 1, NVML_CLOCK_MEM = 2, NVML_CLOCK_VIDEO = 3 };
enum { NVML_TEMPERATURE_GPU = 0 };
enum { NVML_PCIE_UTIL_TX_BYTES = 0, NVML_PCIE_UTIL_RX_BYTES = 1 };

#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16
#define NVML_VALUE_NOT_AVAILABLE_ULL (~0ULL)
#define NVML_MEMORY_V2_VERSION 0x02000028u /* sizeof(nvmlMemory_v2_t) | 2 << 24 */
#define NVML_NO_INSTANCE 0xFFFFFFFFu

typedef struct {
    char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfo_t;

typedef struct {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;

typedef struct {
    unsigned long long bar1Total;
    unsigned long long bar1Free;
    unsigned long long bar1Used;
} nvmlBAR1Memory_t;

/* nvmlProcessInfo_v2_t; the v3 entry points use the same layout. */
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

typedef struct {
    unsigned int pid;
    unsigned long long timeStamp; /* microseconds since the epoch (CPU time) */
    unsigned int smUtil;
    unsigned int memUtil;
    unsigned int encUtil;
    unsigned int decUtil;
} nvmlProcessUtilizationSample_t;

typedef union {
    double dVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    long long sllVal;
    int siVal;
    unsigned short usVal;
} nvmlValue_t;

typedef struct {
    unsigned int fieldId;
    unsigned int scopeId; /* an NVLink field's link; UINT_MAX: every link added up */
    long long timestamp;
    long long latencyUsec;
    unsigned int valueType;
    nvmlReturn_t nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;

enum { NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3 };
enum {
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138,
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139,
    NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX = 140,
    NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX = 141,
};
#define NVML_SCOPE_ALL_LINKS 0xFFFFFFFFu
enum {
    NVML_TOPOLOGY_INTERNAL = 0,
    NVML_TOPOLOGY_SINGLE = 10,
    NVML_TOPOLOGY_MULTIPLE = 20,
    NVML_TOPOLOGY_HOSTBRIDGE = 30,
    NVML_TOPOLOGY_NODE = 40,
    NVML_TOPOLOGY_SYSTEM = 50,
};

/* ------------------------------------------------------------------------ */
/* Every exported NVML function, for call counting and error injection.     */
/* ------------------------------------------------------------------------ */

#define FAKE_NVML_FUNCTIONS(X)                   \
    X(nvmlInit)                                  \
    X(nvmlInit_v2)                               \
    X(nvmlInitWithFlags)                         \
    X(nvmlShutdown)                              \
    X(nvmlErrorString)                           \
    X(nvmlSystemGetDriverVersion)                \
    X(nvmlSystemGetNVMLVersion)                  \
    X(nvmlSystemGetCudaDriverVersion)            \
    X(nvmlSystemGetCudaDriverVersion_v2)         \
    X(nvmlDeviceGetCount)                        \
    X(nvmlDeviceGetCount_v2)                     \
    X(nvmlDeviceGetHandleByIndex)                \
    X(nvmlDeviceGetHandleByIndex_v2)             \
    X(nvmlDeviceGetHandleByUUID)                 \
    X(nvmlDeviceGetHandleByPciBusId_v2)          \
    X(nvmlDeviceGetIndex)                        \
    X(nvmlDeviceGetMinorNumber)                  \
    X(nvmlDeviceGetName)                         \
    X(nvmlDeviceGetUUID)                         \
    X(nvmlDeviceGetSerial)                       \
    X(nvmlDeviceGetPciInfo_v3)                   \
    X(nvmlDeviceGetUtilizationRates)             \
    X(nvmlDeviceGetMemoryInfo)                   \
    X(nvmlDeviceGetMemoryInfo_v2)                \
    X(nvmlDeviceGetBAR1MemoryInfo)               \
    X(nvmlDeviceGetTemperature)                  \
    X(nvmlDeviceGetPowerUsage)                   \
    X(nvmlDeviceGetTotalEnergyConsumption)       \
    X(nvmlDeviceGetEnforcedPowerLimit)           \
    X(nvmlDeviceGetPowerManagementLimit)         \
    X(nvmlDeviceGetClockInfo)                    \
    X(nvmlDeviceGetMaxClockInfo)                 \
    X(nvmlDeviceGetFanSpeed)                     \
    X(nvmlDeviceGetPcieThroughput)               \
    X(nvmlDeviceGetCurrPcieLinkGeneration)       \
    X(nvmlDeviceGetMaxPcieLinkGeneration)        \
    X(nvmlDeviceGetCurrPcieLinkWidth)            \
    X(nvmlDeviceGetMaxPcieLinkWidth)             \
    X(nvmlDeviceGetPerformanceState)             \
    X(nvmlDeviceGetComputeRunningProcesses_v3)   \
    X(nvmlDeviceGetComputeRunningProcesses_v2)   \
    X(nvmlDeviceGetGraphicsRunningProcesses_v3)  \
    X(nvmlDeviceGetGraphicsRunningProcesses_v2)  \
    X(nvmlDeviceGetPersistenceMode)              \
    X(nvmlDeviceGetDisplayMode)                  \
    X(nvmlDeviceGetDisplayActive)                \
    X(nvmlDeviceGetComputeMode)                  \
    X(nvmlDeviceGetEncoderUtilization)           \
    X(nvmlDeviceGetDecoderUtilization)           \
    X(nvmlDeviceGetTotalEccErrors)               \
    X(nvmlDeviceGetMigMode)                      \
    X(nvmlDeviceGetCudaComputeCapability)        \
    X(nvmlDeviceIsMigDeviceHandle)               \
    X(nvmlDeviceGetCurrentClocksEventReasons)    \
    X(nvmlDeviceGetCurrentClocksThrottleReasons) \
    X(nvmlDeviceGetRemappedRows)                 \
    X(nvmlDeviceGetNvLinkState)                  \
    X(nvmlDeviceGetNvLinkRemotePciInfo_v2)       \
    X(nvmlDeviceGetFieldValues)                  \
    X(nvmlDeviceGetTopologyCommonAncestor)       \
    X(nvmlDeviceGetProcessUtilization)          \
    X(nvmlDeviceGetMaxMigDeviceCount)            \
    X(nvmlDeviceGetMigDeviceHandleByIndex)       \
    X(nvmlDeviceGetGpuInstanceId)                \
    X(nvmlDeviceGetComputeInstanceId)

#define AS_ENUM(name) FN_##name,
#define AS_STRING(name) #name,
enum { FAKE_NVML_FUNCTIONS(AS_ENUM) FN_COUNT };
static const char *const FUNCTION_NAMES[FN_COUNT] = {FAKE_NVML_FUNCTIONS(AS_STRING)};

/* Error slots past the functions': one clock type of the clock functions, so that a GPU can
   refuse its memory clock and still answer its SM clock (FAKE_NVML_UNSUPPORTED and _FAIL). */
enum { SLOT_MEM_CLOCK = FN_COUNT, SLOT_MAX_MEM_CLOCK, SLOT_COUNT };

/* Field names accepted by FAKE_NVML_UNSUPPORTED / FAKE_NVML_FAIL, and the functions (or error
   slots) they cover. Any exported function name is accepted too. */
typedef struct {
    const char *field;
    int functions[5]; /* terminated by -1 */
} field_t;

static const field_t FIELDS[] = {
    {"handle", {FN_nvmlDeviceGetHandleByIndex, FN_nvmlDeviceGetHandleByIndex_v2, -1}},
    {"name", {FN_nvmlDeviceGetName, -1}},
    {"uuid", {FN_nvmlDeviceGetUUID, -1}},
    {"serial", {FN_nvmlDeviceGetSerial, -1}},
    {"pci", {FN_nvmlDeviceGetPciInfo_v3, -1}},
    {"utilization", {FN_nvmlDeviceGetUtilizationRates, -1}},
    {"memory", {FN_nvmlDeviceGetMemoryInfo, FN_nvmlDeviceGetMemoryInfo_v2, -1}},
    {"temperature", {FN_nvmlDeviceGetTemperature, -1}},
    {"power", {FN_nvmlDeviceGetPowerUsage, -1}},
    {"energy", {FN_nvmlDeviceGetTotalEnergyConsumption, -1}},
    {"power_limit", {FN_nvmlDeviceGetEnforcedPowerLimit, FN_nvmlDeviceGetPowerManagementLimit, -1}},
    {"clock", {FN_nvmlDeviceGetClockInfo, -1}},
    {"max_clock", {FN_nvmlDeviceGetMaxClockInfo, -1}},
    {"fan", {FN_nvmlDeviceGetFanSpeed, -1}},
    {"pcie", {FN_nvmlDeviceGetPcieThroughput, -1}},
    {"pcie_link",
     {FN_nvmlDeviceGetCurrPcieLinkGeneration, FN_nvmlDeviceGetMaxPcieLinkGeneration,
      FN_nvmlDeviceGetCurrPcieLinkWidth, FN_nvmlDeviceGetMaxPcieLinkWidth, -1}},
    /* The memory clock alone, current and maximum (not for FAKE_NVML_HANG: no call of its own). */
    {"mem_clock", {SLOT_MEM_CLOCK, SLOT_MAX_MEM_CLOCK, -1}},
    {"pstate", {FN_nvmlDeviceGetPerformanceState, -1}},
    {"processes",
     {FN_nvmlDeviceGetComputeRunningProcesses_v3, FN_nvmlDeviceGetComputeRunningProcesses_v2, -1}},
    {"graphics_processes",
     {FN_nvmlDeviceGetGraphicsRunningProcesses_v3, FN_nvmlDeviceGetGraphicsRunningProcesses_v2, -1}},
    {"process_utilization", {FN_nvmlDeviceGetProcessUtilization, -1}},
    {"encoder", {FN_nvmlDeviceGetEncoderUtilization, -1}},
    {"decoder", {FN_nvmlDeviceGetDecoderUtilization, -1}},
    {"nvlink", {FN_nvmlDeviceGetNvLinkState, -1}},
    {"nvlink_remote", {FN_nvmlDeviceGetNvLinkRemotePciInfo_v2, -1}},
    {"nvlink_throughput", {FN_nvmlDeviceGetFieldValues, -1}},
    {"topology", {FN_nvmlDeviceGetTopologyCommonAncestor, -1}},
    {"mig_devices", {FN_nvmlDeviceGetMaxMigDeviceCount, FN_nvmlDeviceGetMigDeviceHandleByIndex, -1}},
    /* System-wide: a GPU prefix is ignored. */
    {"count", {FN_nvmlDeviceGetCount, FN_nvmlDeviceGetCount_v2, -1}},
    {"driver_version", {FN_nvmlSystemGetDriverVersion, -1}},
    {"cuda_version", {FN_nvmlSystemGetCudaDriverVersion, FN_nvmlSystemGetCudaDriverVersion_v2, -1}},
};
#define FIELD_COUNT (sizeof(FIELDS) / sizeof(FIELDS[0]))

static int is_system_function(int fn) {
    switch (fn) {
    case FN_nvmlSystemGetDriverVersion:
    case FN_nvmlSystemGetNVMLVersion:
    case FN_nvmlSystemGetCudaDriverVersion:
    case FN_nvmlSystemGetCudaDriverVersion_v2:
    case FN_nvmlDeviceGetCount:
    case FN_nvmlDeviceGetCount_v2:
        return 1;
    default:
        return 0;
    }
}

static const struct {
    const char *name;
    int code;
} ERROR_NAMES[] = {
    {"SUCCESS", NVML_SUCCESS},
    {"UNINITIALIZED", NVML_ERROR_UNINITIALIZED},
    {"INVALID_ARGUMENT", NVML_ERROR_INVALID_ARGUMENT},
    {"NOT_SUPPORTED", NVML_ERROR_NOT_SUPPORTED},
    {"NO_PERMISSION", NVML_ERROR_NO_PERMISSION},
    {"ALREADY_INITIALIZED", NVML_ERROR_ALREADY_INITIALIZED},
    {"NOT_FOUND", NVML_ERROR_NOT_FOUND},
    {"INSUFFICIENT_SIZE", NVML_ERROR_INSUFFICIENT_SIZE},
    {"INSUFFICIENT_POWER", NVML_ERROR_INSUFFICIENT_POWER},
    {"DRIVER_NOT_LOADED", NVML_ERROR_DRIVER_NOT_LOADED},
    {"TIMEOUT", NVML_ERROR_TIMEOUT},
    {"IRQ_ISSUE", NVML_ERROR_IRQ_ISSUE},
    {"LIBRARY_NOT_FOUND", NVML_ERROR_LIBRARY_NOT_FOUND},
    {"FUNCTION_NOT_FOUND", NVML_ERROR_FUNCTION_NOT_FOUND},
    {"CORRUPTED_INFOROM", NVML_ERROR_CORRUPTED_INFOROM},
    {"GPU_IS_LOST", NVML_ERROR_GPU_IS_LOST},
    {"RESET_REQUIRED", NVML_ERROR_RESET_REQUIRED},
    {"OPERATING_SYSTEM", NVML_ERROR_OPERATING_SYSTEM},
    {"LIB_RM_VERSION_MISMATCH", NVML_ERROR_LIB_RM_VERSION_MISMATCH},
    {"IN_USE", NVML_ERROR_IN_USE},
    {"MEMORY", NVML_ERROR_MEMORY},
    {"NO_DATA", NVML_ERROR_NO_DATA},
    {"VGPU_ECC_NOT_SUPPORTED", NVML_ERROR_VGPU_ECC_NOT_SUPPORTED},
    {"INSUFFICIENT_RESOURCES", NVML_ERROR_INSUFFICIENT_RESOURCES},
    {"FREQ_NOT_SUPPORTED", NVML_ERROR_FREQ_NOT_SUPPORTED},
    {"ARGUMENT_VERSION_MISMATCH", NVML_ERROR_ARGUMENT_VERSION_MISMATCH},
    {"DEPRECATED", NVML_ERROR_DEPRECATED},
    {"NOT_READY", NVML_ERROR_NOT_READY},
    {"GPU_NOT_FOUND", NVML_ERROR_GPU_NOT_FOUND},
    {"INVALID_STATE", NVML_ERROR_INVALID_STATE},
    {"RESET_TYPE_NOT_SUPPORTED", NVML_ERROR_RESET_TYPE_NOT_SUPPORTED},
    {"UNKNOWN", NVML_ERROR_UNKNOWN},
};
#define ERROR_NAME_COUNT (sizeof(ERROR_NAMES) / sizeof(ERROR_NAMES[0]))

/* ------------------------------------------------------------------------ */
/* Simulated state.                                                         */
/* ------------------------------------------------------------------------ */

#define FAKE_MAX_GPUS 64
#define FAKE_MAX_PROCESSES 256
#define SYSTEM_ROW FAKE_MAX_GPUS /* row of the counters/errors for system calls */
#define NAME_SIZE 96

typedef struct fake_gpu {
    unsigned int index;
    unsigned long long queries; /* device queries since init (atomic) */
    long long lost_after;       /* answer GPU_IS_LOST once queries exceed this; -1: never */
    char name[NAME_SIZE];
    unsigned long long clock_events;   /* FAKE_NVML_CLOCK_EVENTS: the reasons bit mask */
    unsigned long long ecc_uncorrected; /* FAKE_NVML_ECC_UNCORRECTED: volatile, uncorrected */
    unsigned long long remapped_pending; /* FAKE_NVML_REMAPPED_PENDING: 1 when a remap waits */
    unsigned long long mig_mode;       /* FAKE_NVML_MIG_MODE: 1 when MIG is enabled */
    unsigned long long energy_reset;   /* FAKE_NVML_ENERGY_RESET: the counter restarts after it */
    unsigned long long memory_total;   /* FAKE_NVML_MEMORY_TOTAL: bytes (0: an H100's) */
    unsigned long long encoder;        /* FAKE_NVML_ENCODER_UTILIZATION: percent */
    unsigned long long decoder;        /* FAKE_NVML_DECODER_UTILIZATION: percent */
    unsigned long long nvlinks;        /* FAKE_NVML_NVLINKS: links it has (0: no NVLink) */
    unsigned long long nvlinks_down;   /* FAKE_NVML_NVLINKS_DOWN: bit mask of links down */
    unsigned long long nvlink_tx_kib;  /* FAKE_NVML_NVLINK_TX_KIB: each link's growth a call */
    unsigned long long nvlink_rx_kib;  /* FAKE_NVML_NVLINK_RX_KIB */
    unsigned long long field_calls;    /* nvmlDeviceGetFieldValues calls since init (atomic) */
    int peers[18];                     /* FAKE_NVML_NVLINK_PEERS: each link's GPU; -1 NVSwitch */
    unsigned int mig_count;            /* FAKE_NVML_MIG_DEVICES: MIG devices on this GPU */
    /* A MIG device (an entry of g_migs) answers as its GPU (index) but for these: */
    int is_mig;
    unsigned int mig_index;            /* its index among its GPU's MIG devices */
    unsigned int gpu_instance_id;
    unsigned int compute_instance_id;
    unsigned long long mig_used_bytes;
    unsigned long long mig_total_bytes;
} fake_gpu_t;

typedef fake_gpu_t *nvmlDevice_t;

typedef struct {
    unsigned int gpu;
    unsigned int pid;
    unsigned long long bytes;
    int graphics;
    int mig; /* the MIG device it runs on ("GPU/MIG:PID:BYTES"); -1: none */
} fake_process_t;

static fake_gpu_t g_gpus[FAKE_MAX_GPUS];
#define FAKE_MAX_MIGS 7 /* an H100's most */
static fake_gpu_t g_migs[FAKE_MAX_GPUS][FAKE_MAX_MIGS]; /* FAKE_NVML_MIG_DEVICES */
static unsigned int g_gpu_count;
static int g_init_refcount;
static char g_driver_version[80];
static int g_cuda_version;
static char g_hang_file[4096];
static char g_processes_file[4096]; /* FAKE_NVML_PROCESSES_FILE: compute processes, read each call */
static double g_hang_s[FAKE_MAX_GPUS + 1][FN_COUNT]; /* FAKE_NVML_HANG: seconds each call sleeps */
static unsigned long long g_release;                 /* bumped by fake_nvml_release_hangs() */
static long long g_inside;                           /* calls sleeping inside the library now */
static int g_crash_on_teardown; /* FAKE_NVML_CRASH_ON_TEARDOWN: teardown under a call crashes */
static unsigned long long g_pcie_delay_ms; /* FAKE_NVML_PCIE_DELAY_MS: a real driver's ~20 ms window */
static unsigned long long g_energy_cpu_us; /* FAKE_NVML_ENERGY_CPU_US: a slow driver's */
static int g_errors[FAKE_MAX_GPUS + 1][SLOT_COUNT];
static unsigned long long g_calls[FAKE_MAX_GPUS + 1][FN_COUNT];
static fake_process_t g_processes[FAKE_MAX_PROCESSES];
static unsigned int g_process_count;

typedef struct {
    unsigned int gpu;
    unsigned int pid;
    unsigned int sm;
} fake_process_sm_t;

static fake_process_sm_t g_process_sm[FAKE_MAX_PROCESSES]; /* FAKE_NVML_PROCESS_UTILIZATION */
static unsigned int g_process_sm_count;
static unsigned long long g_last_seen_us[FAKE_MAX_GPUS]; /* each GPU's last lastSeenTimeStamp */
static int g_topology[FAKE_MAX_GPUS][FAKE_MAX_GPUS]; /* FAKE_NVML_TOPOLOGY; -1: the default */

/* Bus numbers of the eight GPUs in a typical HGX H100 board. */
static const unsigned int HGX_BUSES[8] = {0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb};

/* ------------------------------------------------------------------------ */
/* Configuration from the environment.                                      */
/* ------------------------------------------------------------------------ */

static void config_error(const char *variable, const char *what) {
    fprintf(stderr, "fake_nvml: bad %s: %s\n", variable, what);
}

static int parse_error_code(const char *text, int *code) {
    char *end;
    long number;
    if (strncasecmp(text, "NVML_ERROR_", 11) == 0) {
        text += 11;
    }
    for (size_t i = 0; i < ERROR_NAME_COUNT; i++) {
        if (strcasecmp(text, ERROR_NAMES[i].name) == 0) {
            *code = ERROR_NAMES[i].code;
            return 1;
        }
    }
    errno = 0;
    number = strtol(text, &end, 10);
    if (errno == 0 && end != text && *end == '\0' && number >= 0) {
        *code = (int)number;
        return 1;
    }
    return 0;
}

static int parse_uint(const char *text, unsigned long long *value) {
    char *end;
    errno = 0;
    *value = strtoull(text, &end, 10);
    return errno == 0 && end != text && *end == '\0' && text[0] != '-';
}

/* `variable`, a whole number up to `most` (0 where unset or empty); false, said on stderr,
   where it is not one. */
static int parse_env_uint(const char *variable, unsigned long long most,
                          unsigned long long *value) {
    const char *text = getenv(variable);
    *value = 0;
    if (text == NULL || text[0] == '\0') {
        return 1;
    }
    if (!parse_uint(text, value) || *value > most) {
        config_error(variable, text);
        return 0;
    }
    return 1;
}

static int function_id(const char *name) {
    for (int i = 0; i < FN_COUNT; i++) {
        if (strcmp(FUNCTION_NAMES[i], name) == 0) {
            return i;
        }
    }
    return -1;
}

static void set_error(int gpu, int fn, int code) {
    if (is_system_function(fn)) {
        g_errors[SYSTEM_ROW][fn] = code;
    } else if (gpu < 0) {
        for (int i = 0; i < FAKE_MAX_GPUS; i++) {
            g_errors[i][fn] = code;
        }
    } else {
        g_errors[gpu][fn] = code;
    }
}

/* Functions that count on the system row: a GPU prefix means nothing to them. */
static int is_system_row_function(int fn) {
    switch (fn) {
    case FN_nvmlInit:
    case FN_nvmlInit_v2:
    case FN_nvmlInitWithFlags:
    case FN_nvmlShutdown:
    case FN_nvmlErrorString:
    case FN_nvmlDeviceGetHandleByUUID:
    case FN_nvmlDeviceGetHandleByPciBusId_v2:
        return 1;
    default:
        return is_system_function(fn);
    }
}

/* The functions FIELD names, into `fns` (room for FN_COUNT); returns how many (0: unknown).
   A field of FIELDS or a function name; with `extended` also "init", "shutdown" and "*"
   (every function but nvmlErrorString). */
static int field_functions(const char *field, int extended, int *fns) {
    int n = 0;
    if (extended && strcmp(field, "*") == 0) {
        for (int fn = 0; fn < FN_COUNT; fn++) {
            if (fn != FN_nvmlErrorString) {
                fns[n++] = fn;
            }
        }
        return n;
    }
    if (extended && strcmp(field, "init") == 0) {
        fns[n++] = FN_nvmlInit;
        fns[n++] = FN_nvmlInit_v2;
        fns[n++] = FN_nvmlInitWithFlags;
        return n;
    }
    if (extended && strcmp(field, "shutdown") == 0) {
        fns[n++] = FN_nvmlShutdown;
        return n;
    }
    for (size_t i = 0; i < FIELD_COUNT; i++) {
        if (strcmp(FIELDS[i].field, field) == 0) {
            for (const int *fn = FIELDS[i].functions; *fn >= 0; fn++) {
                if (extended && *fn >= FN_COUNT) {
                    return 0; /* an error slot: nothing to hang */
                }
                fns[n++] = *fn;
            }
            return n;
        }
    }
    fns[0] = function_id(field);
    return fns[0] >= 0 ? 1 : 0;
}

typedef int (*value_parser_t)(const char *text, double *value);
/* The comma list in `variable`, copied into `buffer` for strtok_r: 1 when it is there, 0 when
   the variable is unset or empty (nothing to set), -1 when it is too long (said already). */
static int list_in(const char *variable, char *buffer, size_t size) {
    const char *value = getenv(variable);
    if (value == NULL || value[0] == '\0') {
        return 0;
    }
    if (strlen(value) >= size) {
        config_error(variable, "too long");
        return -1;
    }
    strcpy(buffer, value);
    return 1;
}

typedef void (*value_setter_t)(int gpu, int fn, double value);

/* "[GPU:]FIELD[=VALUE],...": `set(gpu, fn, value)` for each function each item names (gpu -1
   without a prefix), VALUE read by `parse_value`; `fallback` where "=VALUE" is left out, and
   a NAN fallback makes it required. Fields as `field_functions` reads them. */
static int parse_field_list(const char *variable, int extended, double fallback,
                            value_parser_t parse_value, value_setter_t set) {
    char buffer[4096];
    char *save = NULL;
    int fns[FN_COUNT];
    int listed = list_in(variable, buffer, sizeof(buffer));
    if (listed <= 0) {
        return listed == 0;
    }
    for (char *item = strtok_r(buffer, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        int gpu = -1;
        int count;
        double number = fallback;
        char *field = item;
        char *colon = strchr(item, ':');
        char *equals = strchr(item, '=');
        while (*field == ' ') {
            field++;
        }
        if (colon != NULL && (equals == NULL || colon < equals)) {
            unsigned long long index;
            *colon = '\0';
            if (!parse_uint(field, &index) || index >= FAKE_MAX_GPUS) {
                config_error(variable, item);
                return 0;
            }
            gpu = (int)index;
            field = colon + 1;
        }
        if (equals != NULL) {
            *equals = '\0';
            if (!parse_value(equals + 1, &number)) {
                config_error(variable, equals + 1);
                return 0;
            }
        } else if (number != number) { /* NAN: the value may not be left out */
            config_error(variable, item);
            return 0;
        }
        count = field_functions(field, extended, fns);
        if (count == 0) {
            config_error(variable, field);
            return 0;
        }
        for (int i = 0; i < count; i++) {
            set(gpu, fns[i], number);
        }
    }
    return 1;
}

static int parse_error_value(const char *text, double *value) {
    int code;
    if (!parse_error_code(text, &code)) {
        return 0;
    }
    *value = code;
    return 1;
}

static void set_error_value(int gpu, int fn, double code) { set_error(gpu, fn, (int)code); }

/* "[GPU:]FIELD[=ERROR],..." with `default_code` when "=ERROR" is left out. */
static int parse_errors(const char *variable, int default_code) {
    return parse_field_list(variable, 0, default_code, parse_error_value, set_error_value);
}

/* Seconds: a decimal number from 0 to a day. */
static int parse_seconds(const char *text, double *value) {
    char *end;
    errno = 0;
    *value = strtod(text, &end);
    return errno == 0 && end != text && *end == '\0' && *value >= 0.0 && *value <= 86400.0;
}

static void set_hang(int gpu, int fn, double seconds) {
    if (is_system_row_function(fn)) {
        g_hang_s[SYSTEM_ROW][fn] = seconds;
    } else if (gpu < 0) {
        for (int i = 0; i < FAKE_MAX_GPUS; i++) {
            g_hang_s[i][fn] = seconds;
        }
    } else {
        g_hang_s[gpu][fn] = seconds;
    }
}

/* FAKE_NVML_HANG: "[GPU:]FIELD=SECONDS,..." */
static int parse_hangs(void) {
    return parse_field_list("FAKE_NVML_HANG", 1, NAN, parse_seconds, set_hang);
}

/* "INDEX:K,..." */
static int parse_lost(void) {
    char buffer[1024];
    char *save = NULL;
    int listed = list_in("FAKE_NVML_LOST", buffer, sizeof(buffer));
    if (listed <= 0) {
        return listed == 0;
    }
    for (char *item = strtok_r(buffer, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        unsigned long long index, after;
        char *colon = strchr(item, ':');
        if (colon == NULL) {
            config_error("FAKE_NVML_LOST", item);
            return 0;
        }
        *colon = '\0';
        if (!parse_uint(item, &index) || index >= FAKE_MAX_GPUS || !parse_uint(colon + 1, &after)) {
            config_error("FAKE_NVML_LOST", item);
            return 0;
        }
        g_gpus[index].lost_after = (long long)after;
    }
    return 1;
}

/* "GPU:VALUE,..." (VALUE decimal or 0x hex) into the field at `offset` of each named GPU. */
static int parse_per_gpu(const char *variable, size_t offset) {
    char buffer[1024];
    char *save = NULL;
    int listed = list_in(variable, buffer, sizeof(buffer));
    if (listed <= 0) {
        return listed == 0;
    }
    for (char *item = strtok_r(buffer, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        unsigned long long index, number;
        char *end;
        char *colon = strchr(item, ':');
        if (colon == NULL) {
            config_error(variable, item);
            return 0;
        }
        *colon = '\0';
        errno = 0;
        number = strtoull(colon + 1, &end, 0);
        if (!parse_uint(item, &index) || index >= FAKE_MAX_GPUS || errno != 0 ||
            end == colon + 1 || *end != '\0' || colon[1] == '-') {
            config_error(variable, item);
            return 0;
        }
        *(unsigned long long *)((char *)&g_gpus[index] + offset) = number;
    }
    return 1;
}

static int parse_process_list(const char *variable, char *buffer, int graphics);

/* "GPU:PID:BYTES,..." where BYTES may be "na" (NVML_VALUE_NOT_AVAILABLE) and GPU may be
   "GPU/MIG": a process on that GPU's MIG device MIG (an index of FAKE_NVML_MIG_DEVICES). */
static int parse_processes(const char *variable, int graphics) {
    char buffer[8192];
    int listed = list_in(variable, buffer, sizeof(buffer));
    if (listed <= 0) {
        return listed == 0;
    }
    return parse_process_list(variable, buffer, graphics);
}

/* FAKE_NVML_PROCESSES_FILE: the compute processes are what the file lists now, in the format
   of FAKE_NVML_PROCESSES (a missing or empty file lists none), so that a test can start and
   end them while a sampler runs. 0 for a line that does not parse (said on stderr). */
static int reload_processes_file(void) {
    char buffer[8192];
    size_t length = 0;
    unsigned int kept = 0;
    FILE *file = fopen(g_processes_file, "r");
    if (file != NULL) {
        length = fread(buffer, 1, sizeof(buffer) - 1, file);
        fclose(file);
    }
    buffer[length] = '\0';
    while (length > 0 && (buffer[length - 1] == '\n' || buffer[length - 1] == ' ')) {
        buffer[--length] = '\0';
    }
    for (unsigned int i = 0; i < g_process_count; i++) {
        if (g_processes[i].graphics) {
            g_processes[kept++] = g_processes[i];
        }
    }
    g_process_count = kept;
    return length == 0 || parse_process_list("FAKE_NVML_PROCESSES_FILE", buffer, 0);
}

/* The comma list in `buffer` (changed in place) of processes, as parse_processes reads it. */
static int parse_process_list(const char *variable, char *buffer, int graphics) {
    char *save = NULL;
    for (char *item = strtok_r(buffer, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        unsigned long long gpu, pid, bytes, mig = 0;
        char *first = strchr(item, ':');
        char *second = first ? strchr(first + 1, ':') : NULL;
        char *slash = strchr(item, '/');
        if (second == NULL || g_process_count >= FAKE_MAX_PROCESSES) {
            config_error(variable, item);
            return 0;
        }
        *first = '\0';
        *second = '\0';
        if (slash != NULL && slash < first) {
            *slash = '\0';
            if (!parse_uint(slash + 1, &mig) || mig >= FAKE_MAX_MIGS) {
                config_error(variable, slash + 1);
                return 0;
            }
        }
        if (strcasecmp(second + 1, "na") == 0) {
            bytes = NVML_VALUE_NOT_AVAILABLE_ULL;
        } else if (!parse_uint(second + 1, &bytes)) {
            config_error(variable, second + 1);
            return 0;
        }
        if (!parse_uint(item, &gpu) || gpu >= FAKE_MAX_GPUS || !parse_uint(first + 1, &pid)) {
            config_error(variable, item);
            return 0;
        }
        g_processes[g_process_count].gpu = (unsigned int)gpu;
        g_processes[g_process_count].pid = (unsigned int)pid;
        g_processes[g_process_count].bytes = bytes;
        g_processes[g_process_count].graphics = graphics;
        g_processes[g_process_count].mig = slash != NULL && slash < first ? (int)mig : -1;
        g_process_count++;
    }
    return 1;
}

/* FAKE_NVML_MIG_DEVICES: "GPU:GI:CI:USED_MIB:TOTAL_MIB,...", each a MIG device of GPU, in
   order (the first is its MIG device 0). */
static int parse_mig_devices(void) {
    const char *variable = "FAKE_NVML_MIG_DEVICES";
    char buffer[4096];
    char *save = NULL;
    int listed = list_in(variable, buffer, sizeof(buffer));
    if (listed <= 0) {
        return listed == 0;
    }
    for (char *item = strtok_r(buffer, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        unsigned long long numbers[5];
        char *field = item;
        fake_gpu_t *mig;
        for (int i = 0; i < 5; i++) {
            char *colon = strchr(field, ':');
            if ((colon == NULL) != (i == 4)) {
                config_error(variable, item);
                return 0;
            }
            if (colon != NULL) {
                *colon = '\0';
            }
            if (!parse_uint(field, &numbers[i])) {
                config_error(variable, field);
                return 0;
            }
            field = colon + 1;
        }
        if (numbers[0] >= FAKE_MAX_GPUS || g_gpus[numbers[0]].mig_count >= FAKE_MAX_MIGS ||
            numbers[3] > numbers[4]) {
            config_error(variable, "a GPU index, too many MIG devices, or more used than total");
            return 0;
        }
        mig = &g_migs[numbers[0]][g_gpus[numbers[0]].mig_count];
        mig->index = (unsigned int)numbers[0];
        mig->is_mig = 1;
        mig->mig_index = g_gpus[numbers[0]].mig_count++;
        mig->gpu_instance_id = (unsigned int)numbers[1];
        mig->compute_instance_id = (unsigned int)numbers[2];
        mig->mig_used_bytes = numbers[3] * 1024ULL * 1024ULL;
        mig->mig_total_bytes = numbers[4] * 1024ULL * 1024ULL;
    }
    return 1;
}

/* FAKE_NVML_PROCESS_UTILIZATION: "GPU:PID:SM,..." (SM 0 to 100). */
static int parse_process_utilization(void) {
    const char *variable = "FAKE_NVML_PROCESS_UTILIZATION";
    char buffer[8192];
    char *save = NULL;
    int listed = list_in(variable, buffer, sizeof(buffer));
    if (listed <= 0) {
        return listed == 0;
    }
    for (char *item = strtok_r(buffer, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        unsigned long long gpu, pid, sm;
        char *first = strchr(item, ':');
        char *second = first ? strchr(first + 1, ':') : NULL;
        if (second == NULL || g_process_sm_count >= FAKE_MAX_PROCESSES) {
            config_error(variable, item);
            return 0;
        }
        *first = '\0';
        *second = '\0';
        if (!parse_uint(item, &gpu) || gpu >= FAKE_MAX_GPUS || !parse_uint(first + 1, &pid) ||
            !parse_uint(second + 1, &sm) || sm > 100) {
            config_error(variable, item);
            return 0;
        }
        g_process_sm[g_process_sm_count].gpu = (unsigned int)gpu;
        g_process_sm[g_process_sm_count].pid = (unsigned int)pid;
        g_process_sm[g_process_sm_count].sm = (unsigned int)sm;
        g_process_sm_count++;
    }
    return 1;
}

/* A topology level by nvidia-smi's name (X, PIX, PXB, PHB, NODE, SYS), NVML's enum's name
   (INTERNAL, SINGLE, MULTIPLE, HOSTBRIDGE, NODE, SYSTEM) or number. */
static int parse_level(const char *text, int *level) {
    static const struct {
        const char *name;
        int level;
    } LEVELS[] = {
        {"X", NVML_TOPOLOGY_INTERNAL},        {"INTERNAL", NVML_TOPOLOGY_INTERNAL},
        {"PIX", NVML_TOPOLOGY_SINGLE},        {"SINGLE", NVML_TOPOLOGY_SINGLE},
        {"PXB", NVML_TOPOLOGY_MULTIPLE},      {"MULTIPLE", NVML_TOPOLOGY_MULTIPLE},
        {"PHB", NVML_TOPOLOGY_HOSTBRIDGE},    {"HOSTBRIDGE", NVML_TOPOLOGY_HOSTBRIDGE},
        {"NODE", NVML_TOPOLOGY_NODE},         {"SYS", NVML_TOPOLOGY_SYSTEM},
        {"SYSTEM", NVML_TOPOLOGY_SYSTEM},
    };
    unsigned long long number;
    for (size_t i = 0; i < sizeof(LEVELS) / sizeof(LEVELS[0]); i++) {
        if (strcasecmp(text, LEVELS[i].name) == 0) {
            *level = LEVELS[i].level;
            return 1;
        }
    }
    if (parse_uint(text, &number) && number <= 1000) {
        *level = (int)number;
        return 1;
    }
    return 0;
}

/* FAKE_NVML_TOPOLOGY: "A:B:LEVEL,..." (either order answers it). */
static int parse_topology(void) {
    const char *variable = "FAKE_NVML_TOPOLOGY";
    char buffer[4096];
    char *save = NULL;
    int listed = list_in(variable, buffer, sizeof(buffer));
    if (listed <= 0) {
        return listed == 0;
    }
    for (char *item = strtok_r(buffer, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        unsigned long long a, b;
        int level;
        char *first = strchr(item, ':');
        char *second = first ? strchr(first + 1, ':') : NULL;
        if (second == NULL) {
            config_error(variable, item);
            return 0;
        }
        *first = '\0';
        *second = '\0';
        if (!parse_uint(item, &a) || !parse_uint(first + 1, &b) || a >= FAKE_MAX_GPUS ||
            b >= FAKE_MAX_GPUS || !parse_level(second + 1, &level)) {
            config_error(variable, item);
            return 0;
        }
        g_topology[a][b] = g_topology[b][a] = level;
    }
    return 1;
}

/* FAKE_NVML_NVLINK_PEERS: "GPU:PEER/PEER/...,...", the GPU at the other end of each link in
   order (link 0 first); "sw" for an NVSwitch. Links past the list reach an NVSwitch. */
static int parse_peers(void) {
    const char *variable = "FAKE_NVML_NVLINK_PEERS";
    char buffer[4096];
    char *save = NULL;
    int listed = list_in(variable, buffer, sizeof(buffer));
    if (listed <= 0) {
        return listed == 0;
    }
    for (char *item = strtok_r(buffer, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        unsigned long long gpu, peer;
        char *inner = NULL;
        int link = 0;
        char *colon = strchr(item, ':');
        if (colon == NULL) {
            config_error(variable, item);
            return 0;
        }
        *colon = '\0';
        if (!parse_uint(item, &gpu) || gpu >= FAKE_MAX_GPUS) {
            config_error(variable, item);
            return 0;
        }
        for (char *one = strtok_r(colon + 1, "/", &inner); one; one = strtok_r(NULL, "/", &inner)) {
            if (link >= 18) {
                config_error(variable, "more than 18 links");
                return 0;
            }
            if (strcasecmp(one, "sw") == 0) {
                g_gpus[gpu].peers[link++] = -1;
            } else if (parse_uint(one, &peer) && peer < FAKE_MAX_GPUS) {
                g_gpus[gpu].peers[link++] = (int)peer;
            } else {
                config_error(variable, one);
                return 0;
            }
        }
    }
    return 1;
}

/* Names: one for every GPU, or a comma list (the last one repeats). */
static void parse_names(void) {
    const char *value = getenv("FAKE_NVML_GPU_NAME");
    char buffer[4096];
    char *save = NULL;
    const char *last = "NVIDIA H100 80GB HBM3";
    unsigned int i = 0;
    if (value != NULL && value[0] != '\0' && strlen(value) < sizeof(buffer)) {
        strcpy(buffer, value);
        for (char *item = strtok_r(buffer, ",", &save); item && i < FAKE_MAX_GPUS;
             item = strtok_r(NULL, ",", &save), i++) {
            snprintf(g_gpus[i].name, NAME_SIZE, "%s", item);
            last = g_gpus[i].name;
        }
    }
    for (; i < FAKE_MAX_GPUS; i++) {
        snprintf(g_gpus[i].name, NAME_SIZE, "%s", last);
    }
}

/* Reads every knob and resets every counter; returns the code nvmlInit* answers. */
static nvmlReturn_t load_config(void) {
    const char *value;
    unsigned long long count = 2;
    int code;

    memset(g_errors, 0, sizeof(g_errors));
    memset(g_calls, 0, sizeof(g_calls));
    memset(g_hang_s, 0, sizeof(g_hang_s));
    memset(g_gpus, 0, sizeof(g_gpus));
    memset(g_migs, 0, sizeof(g_migs));
    memset(g_last_seen_us, 0, sizeof(g_last_seen_us));
    g_process_count = 0;
    g_process_sm_count = 0;
    for (unsigned int i = 0; i < FAKE_MAX_GPUS; i++) {
        g_gpus[i].index = i;
        g_gpus[i].lost_after = -1;
        g_gpus[i].nvlink_tx_kib = 1024ULL * (i + 1);
        g_gpus[i].nvlink_rx_kib = 2048ULL * (i + 1);
        for (unsigned int link = 0; link < 18; link++) {
            g_gpus[i].peers[link] = -1;
        }
        for (unsigned int j = 0; j < FAKE_MAX_GPUS; j++) {
            g_topology[i][j] = -1;
        }
    }

    value = getenv("FAKE_NVML_INIT_ERROR");
    if (value != NULL && value[0] != '\0') {
        if (!parse_error_code(value, &code)) {
            config_error("FAKE_NVML_INIT_ERROR", value);
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        if (code != NVML_SUCCESS) {
            return code;
        }
    }

    value = getenv("FAKE_NVML_GPU_COUNT");
    if (value != NULL && value[0] != '\0' && (!parse_uint(value, &count) || count > FAKE_MAX_GPUS)) {
        config_error("FAKE_NVML_GPU_COUNT", value);
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    g_gpu_count = (unsigned int)count;

    value = getenv("FAKE_NVML_DRIVER_VERSION");
    snprintf(g_driver_version, sizeof(g_driver_version), "%s",
             value && value[0] ? value : "550.54.15");

    g_cuda_version = 12040;
    value = getenv("FAKE_NVML_CUDA_VERSION");
    if (value != NULL && value[0] != '\0') {
        unsigned long long cuda;
        if (!parse_uint(value, &cuda)) {
            config_error("FAKE_NVML_CUDA_VERSION", value);
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        g_cuda_version = (int)cuda;
    }

    value = getenv("FAKE_NVML_CRASH_ON_TEARDOWN");
    g_crash_on_teardown = value != NULL && strcmp(value, "1") == 0;
    if (value != NULL && value[0] != '\0' && strcmp(value, "0") != 0 && !g_crash_on_teardown) {
        config_error("FAKE_NVML_CRASH_ON_TEARDOWN", value);
        return NVML_ERROR_INVALID_ARGUMENT;
    }

    value = getenv("FAKE_NVML_HANG_FILE");
    snprintf(g_hang_file, sizeof(g_hang_file), "%s", value ? value : "");
    value = getenv("FAKE_NVML_PROCESSES_FILE");
    snprintf(g_processes_file, sizeof(g_processes_file), "%s", value ? value : "");

    if (!parse_env_uint("FAKE_NVML_PCIE_DELAY_MS", 10000, &g_pcie_delay_ms) ||
        !parse_env_uint("FAKE_NVML_ENERGY_CPU_US", 1000000, &g_energy_cpu_us)) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }

    parse_names();
    if (!parse_errors("FAKE_NVML_UNSUPPORTED", NVML_ERROR_NOT_SUPPORTED) ||
        !parse_errors("FAKE_NVML_FAIL", NVML_ERROR_UNKNOWN) || !parse_hangs() || !parse_lost() ||
        !parse_processes("FAKE_NVML_PROCESSES", 0) ||
        !parse_processes("FAKE_NVML_GRAPHICS_PROCESSES", 1) || !parse_process_utilization() ||
        !parse_per_gpu("FAKE_NVML_CLOCK_EVENTS", offsetof(fake_gpu_t, clock_events)) ||
        !parse_per_gpu("FAKE_NVML_ECC_UNCORRECTED", offsetof(fake_gpu_t, ecc_uncorrected)) ||
        !parse_per_gpu("FAKE_NVML_REMAPPED_PENDING", offsetof(fake_gpu_t, remapped_pending)) ||
        !parse_per_gpu("FAKE_NVML_MIG_MODE", offsetof(fake_gpu_t, mig_mode)) ||
        !parse_per_gpu("FAKE_NVML_ENERGY_RESET", offsetof(fake_gpu_t, energy_reset)) ||
        !parse_per_gpu("FAKE_NVML_MEMORY_TOTAL", offsetof(fake_gpu_t, memory_total)) ||
        !parse_per_gpu("FAKE_NVML_ENCODER_UTILIZATION", offsetof(fake_gpu_t, encoder)) ||
        !parse_per_gpu("FAKE_NVML_DECODER_UTILIZATION", offsetof(fake_gpu_t, decoder)) ||
        !parse_per_gpu("FAKE_NVML_NVLINKS", offsetof(fake_gpu_t, nvlinks)) ||
        !parse_per_gpu("FAKE_NVML_NVLINKS_DOWN", offsetof(fake_gpu_t, nvlinks_down)) ||
        !parse_per_gpu("FAKE_NVML_NVLINK_TX_KIB", offsetof(fake_gpu_t, nvlink_tx_kib)) ||
        !parse_per_gpu("FAKE_NVML_NVLINK_RX_KIB", offsetof(fake_gpu_t, nvlink_rx_kib)) ||
        !parse_peers() || !parse_topology() ||
        !parse_mig_devices()) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* The common prologue of every call.                                       */
/* ------------------------------------------------------------------------ */

static void count_call(int row, int fn) {
    __atomic_fetch_add(&g_calls[row][fn], 1ULL, __ATOMIC_RELAXED);
}

static double now_s(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + (double)now.tv_nsec / 1e9;
}

/* Spend `microseconds` of this thread's CPU time, as a driver that busy-waits on the GPU. */
static void spin_cpu(unsigned long long microseconds) {
    const long long goal_ns = (long long)microseconds * 1000LL;
    struct timespec start, now;
    long long spent_ns = 0;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start);
    while (spent_ns < goal_ns) {
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
        spent_ns = (long long)(now.tv_sec - start.tv_sec) * 1000000000LL +
                   (long long)(now.tv_nsec - start.tv_nsec);
    }
}

/* Sleep `seconds` inside a call, counted in g_inside, 10 ms at a time; over at once when
   fake_nvml_release_hangs() is called. */
static void stay_inside(double seconds) {
    const unsigned long long release = __atomic_load_n(&g_release, __ATOMIC_RELAXED);
    const double until = now_s() + seconds;
    __atomic_add_fetch(&g_inside, 1LL, __ATOMIC_RELAXED);
    for (double left = seconds; left > 0.0; left = until - now_s()) {
        const double step = left < 0.01 ? left : 0.01;
        const struct timespec pause = {0, (long)(step * 1e9)};
        if (__atomic_load_n(&g_release, __ATOMIC_RELAXED) != release) {
            break;
        }
        nanosleep(&pause, NULL);
    }
    __atomic_sub_fetch(&g_inside, 1LL, __ATOMIC_RELAXED);
}

/* FAKE_NVML_HANG: `fn` on `row` (a GPU, or SYSTEM_ROW) sleeps as long as it says. */
static void hang(int row, int fn) {
    const double seconds = g_hang_s[row][fn];
    if (seconds > 0.0) {
        stay_inside(seconds);
    }
}

static void wait_while_hang_file_exists(void) {
    const struct timespec pause = {0, 10 * 1000 * 1000}; /* 10 ms */
    if (g_hang_file[0] == '\0') {
        return;
    }
    __atomic_add_fetch(&g_inside, 1LL, __ATOMIC_RELAXED);
    while (access(g_hang_file, F_OK) == 0) {
        nanosleep(&pause, NULL);
    }
    __atomic_sub_fetch(&g_inside, 1LL, __ATOMIC_RELAXED);
}

/* NVML's state goes away (the last nvmlShutdown, or the library unloaded at exit) while calls
   are still inside: a real driver frees what they use. With FAKE_NVML_CRASH_ON_TEARDOWN=1
   that use after free is made certain: say so, then crash as it would. */
static void check_teardown(const char *what) {
    const long long inside = __atomic_load_n(&g_inside, __ATOMIC_RELAXED);
    char line[160];
    int length;
    if (!g_crash_on_teardown || inside <= 0) {
        return;
    }
    length = snprintf(line, sizeof(line), "fake_nvml: %s with %lld call(s) still inside NVML\n",
                      what, inside);
    if (length > 0 && write(STDERR_FILENO, line, (size_t)length) < 0) {
        /* nothing more to do: the crash below says it anyway */
    }
    raise(SIGSEGV);
}

__attribute__((destructor)) static void unloaded(void) {
    check_teardown("the library was unloaded (process exit)");
}

/* System calls: counted, and fail when told to. */
static nvmlReturn_t system_enter(int fn) {
    count_call(SYSTEM_ROW, fn);
    if (g_init_refcount <= 0) {
        return NVML_ERROR_UNINITIALIZED;
    }
    hang(SYSTEM_ROW, fn);
    return g_errors[SYSTEM_ROW][fn];
}

/* Device queries: counted, hang while the hang file exists, then lost or failing when told. */
static int is_device(nvmlDevice_t device) {
    const fake_gpu_t *first_mig = &g_migs[0][0];
    if (device >= first_mig && device < first_mig + FAKE_MAX_GPUS * FAKE_MAX_MIGS) {
        return device->is_mig; /* a MIG device the knob made */
    }
    return device >= g_gpus && device < g_gpus + FAKE_MAX_GPUS;
}

/* A MIG device answers as its GPU: counted, hung, lost and failing with it. */
static nvmlReturn_t device_enter(int fn, nvmlDevice_t device, unsigned long long *tick) {
    unsigned long long queries;
    if (!is_device(device)) {
        count_call(SYSTEM_ROW, fn);
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (device->is_mig) {
        if (!g_gpus[device->index].mig_mode) {
            return NVML_ERROR_INVALID_ARGUMENT; /* MIG was turned off under the handle */
        }
        device = &g_gpus[device->index];
    }
    count_call((int)device->index, fn);
    if (g_init_refcount <= 0) {
        return NVML_ERROR_UNINITIALIZED;
    }
    if (device->index >= g_gpu_count) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    hang((int)device->index, fn);
    wait_while_hang_file_exists();
    queries = __atomic_add_fetch(&device->queries, 1ULL, __ATOMIC_RELAXED);
    if (device->lost_after >= 0 && queries > (unsigned long long)device->lost_after) {
        return NVML_ERROR_GPU_IS_LOST;
    }
    if (tick != NULL) {
        *tick = queries;
    }
    return g_errors[device->index][fn];
}

#define DEVICE_ENTER(fn, device, tick)                          \
    do {                                                        \
        nvmlReturn_t entered_ = device_enter(FN_##fn, device, tick); \
        if (entered_ != NVML_SUCCESS) {                         \
            return entered_;                                    \
        }                                                       \
    } while (0)

#define SYSTEM_ENTER(fn)                                \
    do {                                                \
        nvmlReturn_t entered_ = system_enter(FN_##fn);  \
        if (entered_ != NVML_SUCCESS) {                 \
            return entered_;                            \
        }                                               \
    } while (0)

static nvmlReturn_t copy_string(char *out, unsigned int length, const char *value) {
    if (out == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (strlen(value) + 1 > length) {
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    memcpy(out, value, strlen(value) + 1);
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------------ */
/* Simulated readings: deterministic functions of the GPU's query counter.  */
/* ------------------------------------------------------------------------ */

#define MIB (1024ULL * 1024ULL)
#define H100_MEMORY_TOTAL (81559ULL * MIB)
#define H100_MEMORY_RESERVED (512ULL * MIB)
#define H100_POWER_LIMIT_MW 700000u
#define H100_SM_CLOCK_MAX 1980u
#define H100_SM_CLOCK_IDLE 345u
#define H100_MEM_CLOCK 2619u
#define H100_VIDEO_CLOCK_MAX 1755u
#define H100_PCIE_GEN_MAX 5u   /* an SXM5 H100's host link: PCIe Gen5 x16 */
#define H100_PCIE_WIDTH_MAX 16u
#define PCIE_GEN_IDLE 1u       /* the link drops to Gen1 while the GPU idles, to save power */
#define ENERGY_START_MJ 1000000000ULL /* 1 MJ */
#define ENERGY_PER_QUERY_MJ 20000ULL  /* 20 J */

/* A triangle wave 0 -> 1 -> 0 over `period` ticks, shifted by `phase`. */
static double wave(unsigned long long tick, unsigned int period, unsigned int phase) {
    double x = (double)((tick + phase) % period) / (double)period;
    return x < 0.5 ? 2.0 * x : 2.0 - 2.0 * x;
}

static unsigned int utilization_at(const fake_gpu_t *gpu, unsigned long long tick) {
    return 3u + (unsigned int)(94.0 * wave(tick, 240, 37u * gpu->index));
}

static unsigned long long memory_used_at(const fake_gpu_t *gpu, unsigned long long tick) {
    return 1200ULL * MIB + (unsigned long long)(70000.0 * wave(tick, 480, 53u * gpu->index)) * MIB;
}

/* The GPU's memory: an H100's, or what FAKE_NVML_MEMORY_TOTAL says (up to 2^64 - 1 bytes, as a
   broken driver may answer). */
static unsigned long long memory_total_of(const fake_gpu_t *gpu) {
    return gpu->memory_total ? gpu->memory_total : H100_MEMORY_TOTAL;
}

/* `total` less what is taken; 0 where that is more than the total (a total set too small). */
static unsigned long long memory_free(unsigned long long total, unsigned long long taken) {
    return total > taken ? total - taken : 0;
}

static unsigned int sm_clock_at(const fake_gpu_t *gpu, unsigned long long tick) {
    unsigned int util = utilization_at(gpu, tick);
    if (util >= 40) {
        return H100_SM_CLOCK_MAX;
    }
    return H100_SM_CLOCK_IDLE + (H100_SM_CLOCK_MAX - H100_SM_CLOCK_IDLE) * util / 40u;
}

/* A MIG device has a UUID of its own, "MIG-...", as drivers from R470 on give it. */
static void format_uuid(const fake_gpu_t *gpu, char *out, size_t size) {
    unsigned int seed = 0x9e3779b9u * (gpu->index + 1u);
    if (gpu->is_mig) {
        seed ^= 0x85ebca6bu * (gpu->mig_index + 1u);
    }
    snprintf(out, size, "%s-%08x-%04x-%04x-%04x-%012x", gpu->is_mig ? "MIG" : "GPU", seed,
             (seed >> 7) & 0xffffu,
             0x4000u | ((seed >> 3) & 0x0fffu), 0x8000u | ((seed >> 11) & 0x3fffu),
             0xa100u + gpu->index);
}

static void fill_pci(const fake_gpu_t *gpu, nvmlPciInfo_t *pci) {
    memset(pci, 0, sizeof(*pci));
    pci->domain = gpu->index / 8u;
    pci->bus = HGX_BUSES[gpu->index % 8u];
    pci->device = 0;
    pci->pciDeviceId = 0x233010deu;    /* H100 SXM5 80GB */
    pci->pciSubSystemId = 0x16c110deu;
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.0",
             pci->domain & 0xffffu, pci->bus & 0xffu, pci->device & 0x1fu);
    snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.0", pci->domain, pci->bus & 0xffu,
             pci->device & 0x1fu);
}

/* ------------------------------------------------------------------------ */
/* Initialisation and system queries.                                       */
/* ------------------------------------------------------------------------ */

static nvmlReturn_t init(int fn) {
    nvmlReturn_t result = load_config(); /* resets the counters, so count after it */
    count_call(SYSTEM_ROW, fn);
    if (result != NVML_SUCCESS) {
        return result;
    }
    hang(SYSTEM_ROW, fn);
    g_init_refcount++;
    return NVML_SUCCESS;
}

#ifndef FAKE_NVML_OMIT_nvmlInit
EXPORT nvmlReturn_t nvmlInit(void) { return init(FN_nvmlInit); }
#endif

#ifndef FAKE_NVML_OMIT_nvmlInit_v2
EXPORT nvmlReturn_t nvmlInit_v2(void) { return init(FN_nvmlInit_v2); }
#endif

#ifndef FAKE_NVML_OMIT_nvmlInitWithFlags
EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    return init(FN_nvmlInitWithFlags);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlShutdown
EXPORT nvmlReturn_t nvmlShutdown(void) {
    count_call(SYSTEM_ROW, FN_nvmlShutdown);
    hang(SYSTEM_ROW, FN_nvmlShutdown);
    if (g_init_refcount <= 0) {
        return NVML_ERROR_UNINITIALIZED;
    }
    g_init_refcount--;
    if (g_init_refcount == 0) {
        check_teardown("nvmlShutdown tore NVML down");
    }
    return NVML_SUCCESS;
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlErrorString
EXPORT const char *nvmlErrorString(nvmlReturn_t result) {
    count_call(SYSTEM_ROW, FN_nvmlErrorString);
    for (size_t i = 0; i < ERROR_NAME_COUNT; i++) {
        if (ERROR_NAMES[i].code == result) {
            return ERROR_NAMES[i].name;
        }
    }
    return "Unknown Error";
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlSystemGetDriverVersion
EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    SYSTEM_ENTER(nvmlSystemGetDriverVersion);
    return copy_string(version, length, g_driver_version);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlSystemGetNVMLVersion
EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length) {
    char text[96];
    SYSTEM_ENTER(nvmlSystemGetNVMLVersion);
    snprintf(text, sizeof(text), "%d.%s", g_cuda_version / 1000, g_driver_version);
    return copy_string(version, length, text);
}
#endif

static nvmlReturn_t cuda_version(int *out) {
    if (out == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *out = g_cuda_version;
    return NVML_SUCCESS;
}

#ifndef FAKE_NVML_OMIT_nvmlSystemGetCudaDriverVersion
EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version) {
    SYSTEM_ENTER(nvmlSystemGetCudaDriverVersion);
    return cuda_version(version);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlSystemGetCudaDriverVersion_v2
EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version) {
    SYSTEM_ENTER(nvmlSystemGetCudaDriverVersion_v2);
    return cuda_version(version);
}
#endif

static nvmlReturn_t device_count(unsigned int *count) {
    if (count == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *count = g_gpu_count;
    return NVML_SUCCESS;
}

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetCount
EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) {
    SYSTEM_ENTER(nvmlDeviceGetCount);
    return device_count(count);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetCount_v2
EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    SYSTEM_ENTER(nvmlDeviceGetCount_v2);
    return device_count(count);
}
#endif

/* ------------------------------------------------------------------------ */
/* Handles.                                                                 */
/* ------------------------------------------------------------------------ */

static nvmlReturn_t handle_by_index(int fn, unsigned int index, nvmlDevice_t *device) {
    count_call(index < FAKE_MAX_GPUS ? (int)index : SYSTEM_ROW, fn);
    if (g_init_refcount <= 0) {
        return NVML_ERROR_UNINITIALIZED;
    }
    if (device == NULL || index >= g_gpu_count) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    hang((int)index, fn);
    if (g_errors[index][fn] != NVML_SUCCESS) {
        return g_errors[index][fn];
    }
    *device = &g_gpus[index];
    return NVML_SUCCESS;
}

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetHandleByIndex
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
    return handle_by_index(FN_nvmlDeviceGetHandleByIndex, index, device);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetHandleByIndex_v2
EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    return handle_by_index(FN_nvmlDeviceGetHandleByIndex_v2, index, device);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetHandleByUUID
EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    char text[96];
    count_call(SYSTEM_ROW, FN_nvmlDeviceGetHandleByUUID);
    if (g_init_refcount <= 0) {
        return NVML_ERROR_UNINITIALIZED;
    }
    hang(SYSTEM_ROW, FN_nvmlDeviceGetHandleByUUID);
    if (uuid == NULL || device == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    for (unsigned int i = 0; i < g_gpu_count; i++) {
        format_uuid(&g_gpus[i], text, sizeof(text));
        if (strcmp(text, uuid) == 0) {
            *device = &g_gpus[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetHandleByPciBusId_v2
EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *bus_id, nvmlDevice_t *device) {
    nvmlPciInfo_t pci;
    count_call(SYSTEM_ROW, FN_nvmlDeviceGetHandleByPciBusId_v2);
    if (g_init_refcount <= 0) {
        return NVML_ERROR_UNINITIALIZED;
    }
    hang(SYSTEM_ROW, FN_nvmlDeviceGetHandleByPciBusId_v2);
    if (bus_id == NULL || device == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    for (unsigned int i = 0; i < g_gpu_count; i++) {
        fill_pci(&g_gpus[i], &pci);
        if (strcasecmp(pci.busId, bus_id) == 0 || strcasecmp(pci.busIdLegacy, bus_id) == 0) {
            *device = &g_gpus[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}
#endif

/* ------------------------------------------------------------------------ */
/* Static facts.                                                            */
/* ------------------------------------------------------------------------ */

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetIndex
EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    DEVICE_ENTER(nvmlDeviceGetIndex, device, NULL);
    if (index == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *index = device->index;
    return NVML_SUCCESS;
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetMinorNumber
EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minor) {
    DEVICE_ENTER(nvmlDeviceGetMinorNumber, device, NULL);
    if (minor == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *minor = device->index;
    return NVML_SUCCESS;
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetName
EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    DEVICE_ENTER(nvmlDeviceGetName, device, NULL);
    return copy_string(name, length, device->name);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetUUID
EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    char text[96];
    DEVICE_ENTER(nvmlDeviceGetUUID, device, NULL);
    format_uuid(device, text, sizeof(text));
    return copy_string(uuid, length, text);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetSerial
EXPORT nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length) {
    char text[32];
    DEVICE_ENTER(nvmlDeviceGetSerial, device, NULL);
    snprintf(text, sizeof(text), "165412300%04u", device->index);
    return copy_string(serial, length, text);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetPciInfo_v3
EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    DEVICE_ENTER(nvmlDeviceGetPciInfo_v3, device, NULL);
    if (pci == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    fill_pci(device, pci);
    return NVML_SUCCESS;
}
#endif

/* ------------------------------------------------------------------------ */
/* Readings that move.                                                      */
/* ------------------------------------------------------------------------ */

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetUtilizationRates
EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *out) {
    unsigned long long tick = 0;
    DEVICE_ENTER(nvmlDeviceGetUtilizationRates, device, &tick);
    if (out == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    out->gpu = utilization_at(device, tick);
    out->memory = out->gpu * 3u / 5u;
    return NVML_SUCCESS;
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetMemoryInfo
/* v1 counts the driver's reservation as used, as real drivers do. */
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *out) {
    unsigned long long tick = 0;
    DEVICE_ENTER(nvmlDeviceGetMemoryInfo, device, &tick);
    if (out == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (device->is_mig) {
        out->total = device->mig_total_bytes;
        out->used = device->mig_used_bytes;
        out->free = out->total - out->used;
        return NVML_SUCCESS;
    }
    out->total = memory_total_of(device);
    out->used = memory_used_at(device, tick) + H100_MEMORY_RESERVED;
    out->free = memory_free(out->total, out->used);
    return NVML_SUCCESS;
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetMemoryInfo_v2
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *out) {
    unsigned long long tick = 0;
    DEVICE_ENTER(nvmlDeviceGetMemoryInfo_v2, device, &tick);
    if (out == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (out->version != NVML_MEMORY_V2_VERSION) {
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    }
    if (device->is_mig) {
        out->total = device->mig_total_bytes;
        out->reserved = 0;
        out->used = device->mig_used_bytes;
        out->free = out->total - out->used;
        return NVML_SUCCESS;
    }
    out->total = memory_total_of(device);
    out->reserved = H100_MEMORY_RESERVED;
    out->used = memory_used_at(device, tick);
    out->free = memory_free(out->total, out->reserved + out->used);
    return NVML_SUCCESS;
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetBAR1MemoryInfo
EXPORT nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t device, nvmlBAR1Memory_t *out) {
    DEVICE_ENTER(nvmlDeviceGetBAR1MemoryInfo, device, NULL);
    if (out == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    out->bar1Total = 128ULL * 1024ULL * MIB;
    out->bar1Used = 32ULL * MIB;
    out->bar1Free = out->bar1Total - out->bar1Used;
    return NVML_SUCCESS;
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetTemperature
EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned int *temp) {
    unsigned long long tick = 0;
    DEVICE_ENTER(nvmlDeviceGetTemperature, device, &tick);
    if (temp == NULL || sensor != NVML_TEMPERATURE_GPU) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *temp = 31u + (unsigned int)(44.0 * wave(tick, 600, 71u * device->index));
    return NVML_SUCCESS;
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetPowerUsage
EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *milliwatts) {
    unsigned long long tick = 0;
    DEVICE_ENTER(nvmlDeviceGetPowerUsage, device, &tick);
    if (milliwatts == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *milliwatts = 68000u + utilization_at(device, tick) * 6100u + (unsigned int)(tick % 7u) * 137u;
    return NVML_SUCCESS;
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetTotalEnergyConsumption
/* A counter: GPU i starts at (i + 1) MJ and gains 20 J with every device query; with
   FAKE_NVML_ENERGY_RESET it starts again from 0 after that many queries (a driver reload). */
EXPORT nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device,
                                                        unsigned long long *millijoules) {
    unsigned long long tick = 0;
    DEVICE_ENTER(nvmlDeviceGetTotalEnergyConsumption, device, &tick);
    if (millijoules == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (g_energy_cpu_us > 0) {
        spin_cpu(g_energy_cpu_us);
    }
    if (device->energy_reset > 0 && tick > device->energy_reset) {
        *millijoules = (tick - device->energy_reset) * ENERGY_PER_QUERY_MJ;
    } else {
        *millijoules = ENERGY_START_MJ * (device->index + 1ULL) + tick * ENERGY_PER_QUERY_MJ;
    }
    return NVML_SUCCESS;
}
#endif

static nvmlReturn_t power_limit(unsigned int *milliwatts) {
    if (milliwatts == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *milliwatts = H100_POWER_LIMIT_MW;
    return NVML_SUCCESS;
}

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetEnforcedPowerLimit
EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *milliwatts) {
    DEVICE_ENTER(nvmlDeviceGetEnforcedPowerLimit, device, NULL);
    return power_limit(milliwatts);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetPowerManagementLimit
EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device,
                                                      unsigned int *milliwatts) {
    DEVICE_ENTER(nvmlDeviceGetPowerManagementLimit, device, NULL);
    return power_limit(milliwatts);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetClockInfo
EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, int type, unsigned int *mhz) {
    unsigned long long tick = 0;
    DEVICE_ENTER(nvmlDeviceGetClockInfo, device, &tick);
    if (mhz == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    switch (type) {
    case NVML_CLOCK_GRAPHICS:
    case NVML_CLOCK_SM:
        *mhz = sm_clock_at(device, tick);
        return NVML_SUCCESS;
    case NVML_CLOCK_MEM:
        if (g_errors[device->index][SLOT_MEM_CLOCK] != NVML_SUCCESS) {
            return g_errors[device->index][SLOT_MEM_CLOCK];
        }
        *mhz = H100_MEM_CLOCK;
        return NVML_SUCCESS;
    case NVML_CLOCK_VIDEO:
        *mhz = sm_clock_at(device, tick) * 8u / 9u;
        return NVML_SUCCESS;
    default:
        return NVML_ERROR_INVALID_ARGUMENT;
    }
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetMaxClockInfo
EXPORT nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, int type, unsigned int *mhz) {
    DEVICE_ENTER(nvmlDeviceGetMaxClockInfo, device, NULL);
    if (mhz == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    switch (type) {
    case NVML_CLOCK_GRAPHICS:
    case NVML_CLOCK_SM:
        *mhz = H100_SM_CLOCK_MAX;
        return NVML_SUCCESS;
    case NVML_CLOCK_MEM:
        if (g_errors[device->index][SLOT_MAX_MEM_CLOCK] != NVML_SUCCESS) {
            return g_errors[device->index][SLOT_MAX_MEM_CLOCK];
        }
        *mhz = H100_MEM_CLOCK;
        return NVML_SUCCESS;
    case NVML_CLOCK_VIDEO:
        *mhz = H100_VIDEO_CLOCK_MAX;
        return NVML_SUCCESS;
    default:
        return NVML_ERROR_INVALID_ARGUMENT;
    }
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetFanSpeed
EXPORT nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int *percent) {
    unsigned long long tick = 0;
    DEVICE_ENTER(nvmlDeviceGetFanSpeed, device, &tick);
    if (percent == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *percent = 30u + (unsigned int)(45.0 * wave(tick, 600, 71u * device->index));
    return NVML_SUCCESS;
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetPcieThroughput
EXPORT nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t device, int counter,
                                                unsigned int *kib_per_s) {
    unsigned long long tick = 0;
    DEVICE_ENTER(nvmlDeviceGetPcieThroughput, device, &tick);
    if (kib_per_s == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (g_pcie_delay_ms > 0) { /* the driver measures over a window before it answers */
        stay_inside((double)g_pcie_delay_ms / 1000.0);
    }
    switch (counter) {
    case NVML_PCIE_UTIL_TX_BYTES:
        *kib_per_s = 1500u + (unsigned int)(2000000.0 * wave(tick, 180, 29u * device->index));
        return NVML_SUCCESS;
    case NVML_PCIE_UTIL_RX_BYTES:
        *kib_per_s = 2500u + (unsigned int)(12000000.0 * wave(tick, 300, 41u * device->index));
        return NVML_SUCCESS;
    default:
        return NVML_ERROR_INVALID_ARGUMENT;
    }
}
#endif

/* The current link: the full generation while the GPU works (P0), Gen1 while it idles. */
static nvmlReturn_t pcie_link_value(nvmlDevice_t device, unsigned long long tick, int generation,
                                    unsigned int *value) {
    if (value == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (!generation) {
        *value = H100_PCIE_WIDTH_MAX;
    } else {
        *value = utilization_at(device, tick) >= 10u ? H100_PCIE_GEN_MAX : PCIE_GEN_IDLE;
    }
    return NVML_SUCCESS;
}

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetCurrPcieLinkGeneration
EXPORT nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned int *gen) {
    unsigned long long tick = 0;
    DEVICE_ENTER(nvmlDeviceGetCurrPcieLinkGeneration, device, &tick);
    return pcie_link_value(device, tick, 1, gen);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetCurrPcieLinkWidth
EXPORT nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned int *width) {
    unsigned long long tick = 0;
    DEVICE_ENTER(nvmlDeviceGetCurrPcieLinkWidth, device, &tick);
    return pcie_link_value(device, tick, 0, width);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetMaxPcieLinkGeneration
EXPORT nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *gen) {
    DEVICE_ENTER(nvmlDeviceGetMaxPcieLinkGeneration, device, NULL);
    if (gen == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *gen = H100_PCIE_GEN_MAX;
    return NVML_SUCCESS;
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetMaxPcieLinkWidth
EXPORT nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t device, unsigned int *width) {
    DEVICE_ENTER(nvmlDeviceGetMaxPcieLinkWidth, device, NULL);
    if (width == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *width = H100_PCIE_WIDTH_MAX;
    return NVML_SUCCESS;
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetPerformanceState
EXPORT nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, unsigned int *pstate) {
    unsigned long long tick = 0;
    DEVICE_ENTER(nvmlDeviceGetPerformanceState, device, &tick);
    if (pstate == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *pstate = utilization_at(device, tick) >= 10u ? 0u : 2u;
    return NVML_SUCCESS;
}
#endif

/* ------------------------------------------------------------------------ */
/* Processes: the usual two-call protocol (ask the count, then fill).       */
/* ------------------------------------------------------------------------ */

/* Whether process `i` is listed on `device`: a GPU lists every process on it, its MIG devices'
   too (as the driver answers a privileged caller); a MIG device lists its own. */
static int runs_on(unsigned int i, nvmlDevice_t device, int graphics) {
    const fake_process_t *process = &g_processes[i];
    if (process->gpu != device->index || process->graphics != graphics) {
        return 0;
    }
    return !device->is_mig || process->mig == (int)device->mig_index;
}

static nvmlReturn_t running_processes(nvmlDevice_t device, int graphics, unsigned int *count,
                                      nvmlProcessInfo_t *infos) {
    unsigned int found = 0;
    if (count == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (!graphics && g_processes_file[0] != '\0' && !reload_processes_file()) {
        return NVML_ERROR_UNKNOWN;
    }
    for (unsigned int i = 0; i < g_process_count; i++) {
        found += runs_on(i, device, graphics);
    }
    if (found == 0) {
        *count = 0;
        return NVML_SUCCESS;
    }
    if (*count < found || infos == NULL) {
        *count = found;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    found = 0;
    for (unsigned int i = 0; i < g_process_count; i++) {
        if (runs_on(i, device, graphics)) {
            const int mig = g_processes[i].mig;
            const fake_gpu_t *instance = mig >= 0 ? &g_migs[device->index][mig] : NULL;
            infos[found].pid = g_processes[i].pid;
            infos[found].usedGpuMemory = g_processes[i].bytes;
            infos[found].gpuInstanceId = instance ? instance->gpu_instance_id : NVML_NO_INSTANCE;
            infos[found].computeInstanceId =
                instance ? instance->compute_instance_id : NVML_NO_INSTANCE;
            found++;
        }
    }
    *count = found;
    return NVML_SUCCESS;
}

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetComputeRunningProcesses_v3
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device,
                                                            unsigned int *count,
                                                            nvmlProcessInfo_t *infos) {
    DEVICE_ENTER(nvmlDeviceGetComputeRunningProcesses_v3, device, NULL);
    return running_processes(device, 0, count, infos);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetComputeRunningProcesses_v2
EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device,
                                                            unsigned int *count,
                                                            nvmlProcessInfo_t *infos) {
    DEVICE_ENTER(nvmlDeviceGetComputeRunningProcesses_v2, device, NULL);
    return running_processes(device, 0, count, infos);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetGraphicsRunningProcesses_v3
EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device,
                                                             unsigned int *count,
                                                             nvmlProcessInfo_t *infos) {
    DEVICE_ENTER(nvmlDeviceGetGraphicsRunningProcesses_v3, device, NULL);
    return running_processes(device, 1, count, infos);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetGraphicsRunningProcesses_v2
EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device,
                                                             unsigned int *count,
                                                             nvmlProcessInfo_t *infos) {
    DEVICE_ENTER(nvmlDeviceGetGraphicsRunningProcesses_v2, device, NULL);
    return running_processes(device, 1, count, infos);
}
#endif

/* Per-process utilization: one sample per process FAKE_NVML_PROCESS_UTILIZATION names on the GPU,
   taken "now", PROCESS_SAMPLE_STEP_US after the previous device query; NOT_FOUND when there is
   no sample newer than lastSeenTimeStamp (as the driver answers for idle processes). */
#define PROCESS_SAMPLE_BASE_US 1700000000000000ULL
#define PROCESS_SAMPLE_STEP_US 100000ULL /* 0.1 s of simulated time per device query */

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetProcessUtilization
EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                                    nvmlProcessUtilizationSample_t *samples,
                                                    unsigned int *count,
                                                    unsigned long long last_seen_us) {
    unsigned long long tick = 0;
    unsigned long long now_us;
    unsigned int found = 0;
    DEVICE_ENTER(nvmlDeviceGetProcessUtilization, device, &tick);
    if (count == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    g_last_seen_us[device->index] = last_seen_us;
    now_us = PROCESS_SAMPLE_BASE_US + tick * PROCESS_SAMPLE_STEP_US;
    for (unsigned int i = 0; i < g_process_sm_count; i++) {
        found += g_process_sm[i].gpu == device->index;
    }
    if (found == 0 || now_us <= last_seen_us) {
        return NVML_ERROR_NOT_FOUND;
    }
    if (samples == NULL || *count < found) {
        *count = found;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    found = 0;
    for (unsigned int i = 0; i < g_process_sm_count; i++) {
        if (g_process_sm[i].gpu == device->index) {
            memset(&samples[found], 0, sizeof(samples[found]));
            samples[found].pid = g_process_sm[i].pid;
            samples[found].timeStamp = now_us;
            samples[found].smUtil = g_process_sm[i].sm;
            samples[found].memUtil = g_process_sm[i].sm / 2u;
            found++;
        }
    }
    *count = found;
    return NVML_SUCCESS;
}
#endif

/* ------------------------------------------------------------------------ */
/* What other monitors (nvitop) also ask, so they can run against this too. */
/* ------------------------------------------------------------------------ */

static nvmlReturn_t set_uint(unsigned int *out, unsigned int value) {
    if (out == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *out = value;
    return NVML_SUCCESS;
}

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetPersistenceMode
EXPORT nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, unsigned int *mode) {
    DEVICE_ENTER(nvmlDeviceGetPersistenceMode, device, NULL);
    return set_uint(mode, 1u); /* enabled */
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetDisplayMode
EXPORT nvmlReturn_t nvmlDeviceGetDisplayMode(nvmlDevice_t device, unsigned int *mode) {
    DEVICE_ENTER(nvmlDeviceGetDisplayMode, device, NULL);
    return set_uint(mode, 0u);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetDisplayActive
EXPORT nvmlReturn_t nvmlDeviceGetDisplayActive(nvmlDevice_t device, unsigned int *active) {
    DEVICE_ENTER(nvmlDeviceGetDisplayActive, device, NULL);
    return set_uint(active, 0u);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetComputeMode
EXPORT nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, unsigned int *mode) {
    DEVICE_ENTER(nvmlDeviceGetComputeMode, device, NULL);
    return set_uint(mode, 0u); /* default */
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetEncoderUtilization
EXPORT nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned int *util,
                                                    unsigned int *period_us) {
    DEVICE_ENTER(nvmlDeviceGetEncoderUtilization, device, NULL);
    if (set_uint(util, (unsigned int)device->encoder) != NVML_SUCCESS) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    return set_uint(period_us, 167000u);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetDecoderUtilization
EXPORT nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned int *util,
                                                    unsigned int *period_us) {
    DEVICE_ENTER(nvmlDeviceGetDecoderUtilization, device, NULL);
    if (set_uint(util, (unsigned int)device->decoder) != NVML_SUCCESS) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    return set_uint(period_us, 167000u);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetTotalEccErrors
EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int error_type,
                                                int counter_type, unsigned long long *count) {
    DEVICE_ENTER(nvmlDeviceGetTotalEccErrors, device, NULL);
    if (count == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    /* NVML_MEMORY_ERROR_TYPE_UNCORRECTED (1), NVML_VOLATILE_ECC (0) */
    *count = (error_type == 1 && counter_type == 0) ? device->ecc_uncorrected : 0;
    return NVML_SUCCESS;
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetMigMode
EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *current,
                                         unsigned int *pending) {
    DEVICE_ENTER(nvmlDeviceGetMigMode, device, NULL);
    if (set_uint(current, (unsigned int)device->mig_mode) != NVML_SUCCESS) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    return set_uint(pending, (unsigned int)device->mig_mode);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetCudaComputeCapability
EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major,
                                                       int *minor) {
    DEVICE_ENTER(nvmlDeviceGetCudaComputeCapability, device, NULL);
    if (major == NULL || minor == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *major = 9;
    *minor = 0;
    return NVML_SUCCESS;
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceIsMigDeviceHandle
EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *is_mig) {
    DEVICE_ENTER(nvmlDeviceIsMigDeviceHandle, device, NULL);
    return set_uint(is_mig, device->is_mig ? 1u : 0u);
}
#endif

/* ------------------------------------------------------------------------ */
/* MIG devices (FAKE_NVML_MIG_DEVICES, on a GPU in FAKE_NVML_MIG_MODE).      */
/* ------------------------------------------------------------------------ */

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetMaxMigDeviceCount
EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    DEVICE_ENTER(nvmlDeviceGetMaxMigDeviceCount, device, NULL);
    if (device->is_mig) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    return set_uint(count, FAKE_MAX_MIGS);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetMigDeviceHandleByIndex
/* NOT_FOUND past the last MIG device, as the driver answers for an empty slot. */
EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                        nvmlDevice_t *mig) {
    DEVICE_ENTER(nvmlDeviceGetMigDeviceHandleByIndex, device, NULL);
    if (mig == NULL || device->is_mig || !device->mig_mode) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (index >= device->mig_count) {
        return NVML_ERROR_NOT_FOUND;
    }
    *mig = &g_migs[device->index][index];
    return NVML_SUCCESS;
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetGpuInstanceId
EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id) {
    DEVICE_ENTER(nvmlDeviceGetGpuInstanceId, device, NULL);
    if (!device->is_mig) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    return set_uint(id, device->gpu_instance_id);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetComputeInstanceId
EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id) {
    DEVICE_ENTER(nvmlDeviceGetComputeInstanceId, device, NULL);
    if (!device->is_mig) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    return set_uint(id, device->compute_instance_id);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetCurrentClocksEventReasons
EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                           unsigned long long *reasons) {
    DEVICE_ENTER(nvmlDeviceGetCurrentClocksEventReasons, device, NULL);
    if (reasons == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *reasons = device->clock_events;
    return NVML_SUCCESS;
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetNvLinkState
/* As a driver answers: InvalidArgument past NVML_NVLINK_MAX_LINKS (18 here), NotSupported for
   a link the GPU does not have (every link of a PCIe card), else NVML_FEATURE_ENABLED (1)
   while the link is up and NVML_FEATURE_DISABLED (0) while it is down. */
EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                             unsigned int *is_active) {
    DEVICE_ENTER(nvmlDeviceGetNvLinkState, device, NULL);
    if (link >= 18u) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (link >= device->nvlinks) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    return set_uint(is_active, (device->nvlinks_down >> link) & 1u ? 0u : 1u);
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetNvLinkRemotePciInfo_v2
/* The PCI info of what link `link` reaches: a GPU of FAKE_NVML_NVLINK_PEERS, else an
   NVSwitch (bus 0x05 + link % 4, as an HGX board's four switches). */
EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link,
                                                        nvmlPciInfo_t *pci) {
    DEVICE_ENTER(nvmlDeviceGetNvLinkRemotePciInfo_v2, device, NULL);
    if (pci == NULL || link >= 18u) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (link >= device->nvlinks) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    if (device->peers[link] >= 0) {
        fill_pci(&g_gpus[device->peers[link]], pci);
        return NVML_SUCCESS;
    }
    memset(pci, 0, sizeof(*pci));
    pci->bus = 0x05u + link % 4u;
    pci->pciDeviceId = 0x22a310deu; /* NVSwitch */
    snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "0000:%02X:00.0", pci->bus);
    snprintf(pci->busId, sizeof(pci->busId), "00000000:%02X:00.0", pci->bus);
    return NVML_SUCCESS;
}
#endif

/* One NVLink throughput counter (KiB since init): each link that is up grows by the GPU's
   FAKE_NVML_NVLINK_TX_KIB (RX_KIB) with every nvmlDeviceGetFieldValues call; raw counts a
   sixteenth more (protocol overhead). */
static nvmlReturn_t nvlink_counter(const fake_gpu_t *gpu, unsigned int field, unsigned int scope,
                                   unsigned long long calls, unsigned long long *kib) {
    const int tx = field == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX ||
                   field == NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX;
    const unsigned long long step = tx ? gpu->nvlink_tx_kib : gpu->nvlink_rx_kib;
    unsigned long long links = 0;
    if (gpu->nvlinks == 0) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    if (scope == NVML_SCOPE_ALL_LINKS) {
        for (unsigned long long link = 0; link < gpu->nvlinks && link < 18; link++) {
            links += ((gpu->nvlinks_down >> link) & 1u) ? 0u : 1u;
        }
    } else if (scope < gpu->nvlinks && scope < 18u) {
        links = ((gpu->nvlinks_down >> scope) & 1u) ? 0u : 1u;
    } else {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *kib = step * calls * links;
    if (field == NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX ||
        field == NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX) {
        *kib += *kib / 16u;
    }
    return NVML_SUCCESS;
}

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetFieldValues
/* The NVLink throughput fields (138 to 141) are answered; every other field, and each of
   them on a GPU without NVLink, answers NotSupported in its own nvmlReturn, as a driver
   does. FAKE_NVML_UNSUPPORTED=nvlink_throughput makes every field NotSupported too; another
   error fails the whole call. */
EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int count,
                                             nvmlFieldValue_t *values) {
    unsigned long long calls;
    nvmlReturn_t entered = device_enter(FN_nvmlDeviceGetFieldValues, device, NULL);
    if (entered != NVML_SUCCESS && entered != NVML_ERROR_NOT_SUPPORTED) {
        return entered;
    }
    if (values == NULL || count < 0) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (device->is_mig) {
        device = &g_gpus[device->index];
    }
    calls = __atomic_add_fetch(&device->field_calls, 1ULL, __ATOMIC_RELAXED);
    for (int i = 0; i < count; i++) {
        nvmlFieldValue_t *value = &values[i];
        value->timestamp = (long long)(now_s() * 1e6);
        value->latencyUsec = 0;
        value->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
        value->value.ullVal = 0;
        if (entered == NVML_ERROR_NOT_SUPPORTED || value->fieldId < 138u ||
            value->fieldId > 141u) {
            value->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
            continue;
        }
        value->nvmlReturn =
            nvlink_counter(device, value->fieldId, value->scopeId, calls, &value->value.ullVal);
    }
    return NVML_SUCCESS;
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetTopologyCommonAncestor
/* FAKE_NVML_TOPOLOGY's level for the pair, else an HGX board's: the same GPU INTERNAL, GPUs
   2k and 2k+1 behind one PCIe switch (PXB), four to a CPU socket (NODE), else SYS. */
EXPORT nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t first, nvmlDevice_t second,
                                                        int *level) {
    unsigned int a, b;
    DEVICE_ENTER(nvmlDeviceGetTopologyCommonAncestor, first, NULL);
    if (level == NULL || !is_device(second) || second->index >= g_gpu_count) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    a = first->index;
    b = second->index;
    if (g_topology[a][b] >= 0) {
        *level = g_topology[a][b];
    } else if (a == b) {
        *level = NVML_TOPOLOGY_INTERNAL;
    } else if (a / 2u == b / 2u) {
        *level = NVML_TOPOLOGY_MULTIPLE;
    } else if (a / 4u == b / 4u) {
        *level = NVML_TOPOLOGY_NODE;
    } else {
        *level = NVML_TOPOLOGY_SYSTEM;
    }
    return NVML_SUCCESS;
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetRemappedRows
EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corr_rows,
                                              unsigned int *unc_rows, unsigned int *is_pending,
                                              unsigned int *failure_occurred) {
    DEVICE_ENTER(nvmlDeviceGetRemappedRows, device, NULL);
    if (corr_rows == NULL || unc_rows == NULL || is_pending == NULL || failure_occurred == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *corr_rows = 0;
    *unc_rows = device->remapped_pending ? 1u : 0u;
    *is_pending = device->remapped_pending ? 1u : 0u;
    *failure_occurred = 0;
    return NVML_SUCCESS;
}
#endif

#ifndef FAKE_NVML_OMIT_nvmlDeviceGetCurrentClocksThrottleReasons
EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                              unsigned long long *reasons) {
    DEVICE_ENTER(nvmlDeviceGetCurrentClocksThrottleReasons, device, NULL);
    if (reasons == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *reasons = device->clock_events;
    return NVML_SUCCESS;
}
#endif

/* ------------------------------------------------------------------------ */
/* Test hooks.                                                              */
/* ------------------------------------------------------------------------ */

EXPORT long long fake_nvml_call_count(const char *function) {
    int fn = function ? function_id(function) : -1;
    unsigned long long total = 0;
    if (fn < 0) {
        return -1;
    }
    for (int row = 0; row <= SYSTEM_ROW; row++) {
        total += __atomic_load_n(&g_calls[row][fn], __ATOMIC_RELAXED);
    }
    return (long long)total;
}

EXPORT long long fake_nvml_gpu_call_count(const char *function, int gpu) {
    int fn = function ? function_id(function) : -1;
    if (fn < 0 || gpu < -1 || gpu >= FAKE_MAX_GPUS) {
        return -1;
    }
    return (long long)__atomic_load_n(&g_calls[gpu < 0 ? SYSTEM_ROW : gpu][fn], __ATOMIC_RELAXED);
}

EXPORT long long fake_nvml_device_queries(int gpu) {
    if (gpu < 0 || gpu >= FAKE_MAX_GPUS) {
        return -1;
    }
    return (long long)__atomic_load_n(&g_gpus[gpu].queries, __ATOMIC_RELAXED);
}

EXPORT long long fake_nvml_last_seen_timestamp(int gpu) {
    if (gpu < 0 || gpu >= FAKE_MAX_GPUS) {
        return -1;
    }
    return (long long)g_last_seen_us[gpu];
}

EXPORT long long fake_nvml_calls_inside(void) { return __atomic_load_n(&g_inside, __ATOMIC_RELAXED); }

EXPORT void fake_nvml_release_hangs(void) {
    memset(g_hang_s, 0, sizeof(g_hang_s));
    __atomic_add_fetch(&g_release, 1ULL, __ATOMIC_RELAXED);
}
