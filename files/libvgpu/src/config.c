/* Configuration. The device plugin's read-only quota file (/etc/vgpu/quota.conf), when present,
 * is the whole configuration and the region folder is the contract's (/var/run/vgpu): nothing in
 * the environment changes them. Without it (running by hand) the environment configures, with
 * VGPU_CONFIG_FILE naming a quota file over it. Any malformed value is an error that names the
 * value: the caller fails closed. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "vgpu.h"

/* Charged per CUDA context (quota file key context_reserve, else VGPU_CONTEXT_RESERVE): what a
 * CUDA 13 context took on an H200 with driver 580 (527 MiB driver API, 619 MiB PyTorch). */
#define DEFAULT_CTX_RESERVE "512MiB"

/* The size grammar (contract/contract.yml, sizes), which the collection's and the components' Python
 * parser read alike: blanks, ASCII digits, blanks, a binary suffix in any letter case (MiB, GiB, TiB or
 * Kubernetes' Mi, Gi, Ti; none means MiB), blanks. Decimal units (MB, G) are refused as ambiguous, KiB
 * because sizes count whole MiB, and a size whose bytes do not fit in 64 bits. Zero is a size: each
 * use states its minimum. The conformance vectors are contract/sizes.def (tests/unit.c). */
#define SIZE_MAX_MIB ((1ULL << 44) - 1)

static int blank(char c)
{
    return c == ' ' || c == '\t';
}

static uint64_t mib_per_suffix(const char *suffix, size_t len)
{
    static const struct {
        const char *name;
        uint64_t mib;
    } suffixes[] = {{"", 1}, {"mi", 1}, {"mib", 1}, {"gi", 1024}, {"gib", 1024}, {"ti", 1ULL << 20}, {"tib", 1ULL << 20}};
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++)
        if (strlen(suffixes[i].name) == len && strncasecmp(suffix, suffixes[i].name, len) == 0)
            return suffixes[i].mib;
    return 0;
}

int vgpu_parse_size(const char *text, uint64_t *bytes)
{
    const char *p = text;
    uint64_t mib = 0;
    while (blank(*p))
        p++;
    if (*p < '0' || *p > '9')
        return -1;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (mib > (SIZE_MAX_MIB - (uint64_t)(*p - '0')) / 10)
            return -1;
        mib = mib * 10 + (uint64_t)(*p - '0');
    }
    while (blank(*p))
        p++;
    const char *suffix = p;
    while ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z'))
        p++;
    uint64_t factor = mib_per_suffix(suffix, (size_t)(p - suffix));
    while (blank(*p))
        p++;
    if (*p != '\0' || factor == 0 || mib > SIZE_MAX_MIB / factor)
        return -1;
    *bytes = mib * factor * VGPU_MIB;
    return 0;
}

/* "3000MiB" (every device) or "0:3000MiB,1:2000MiB" (per CUDA ordinal). */
int vgpu_parse_limits(const char *text, uint64_t out[VGPU_MAX_DEVICES], char *err, size_t errlen)
{
    char buf[512];
    memset(out, 0, sizeof(uint64_t) * VGPU_MAX_DEVICES);
    if (strlen(text) >= sizeof buf) {
        snprintf(err, errlen, "memory limit \"%.40s...\" is too long", text);
        return -1;
    }
    strcpy(buf, text);
    if (!strchr(buf, ':')) {
        uint64_t b;
        if (vgpu_parse_size(buf, &b) != 0 || b == 0) { /* a quota must hold something */
            snprintf(err, errlen,
                     "memory limit \"%s\" is not a size: expected e.g. 3000MiB, 3GiB or 0:3000MiB,1:2000MiB",
                     text);
            return -1;
        }
        for (int i = 0; i < VGPU_MAX_DEVICES; i++)
            out[i] = b;
        return 0;
    }
    char *save = NULL;
    for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *colon = strchr(item, ':');
        char *end = NULL;
        long long idx = colon ? vgpu_decimal(item, &end) : -1;
        uint64_t b;
        if (!colon || end != colon || idx < 0 || idx >= VGPU_MAX_DEVICES || !isdigit((unsigned char)item[0])
            || vgpu_parse_size(colon + 1, &b) != 0 || b == 0) {
            snprintf(err, errlen,
                     "memory limit item \"%s\" in \"%s\" is malformed: expected <device 0-%d>:<size>, e.g. 0:3000MiB",
                     item, text, VGPU_MAX_DEVICES - 1);
            return -1;
        }
        if (out[idx]) {
            snprintf(err, errlen, "memory limit \"%s\" names device %lld twice", text, idx);
            return -1;
        }
        out[idx] = b;
    }
    return 0;
}

static int parse_switch(const char *name, const char *value, int *out, char *err, size_t errlen)
{
    if (strcmp(value, "0") == 0 || strcmp(value, "1") == 0) {
        *out = value[0] - '0';
        return 0;
    }
    snprintf(err, errlen, "%s=\"%s\" is invalid: expected 0 or 1", name, value);
    return -1;
}

struct switch_def {
    const char *file_key;
    const char *env;
    size_t offset;
    int def;
    unsigned bit;
};
static const struct switch_def switches[] = {
#define SWITCH(key, env, field, def, bit) {#key, #env, offsetof(struct vgpu_config, field), def, bit},
#include "switches.def"
#undef SWITCH
};
#define NSWITCHES (sizeof switches / sizeof switches[0])

/* ", limit, gpu_virtual_memory, ..." for messages */
static const char *switch_keys(void)
{
    static char keys[256];
    if (!keys[0])
        for (size_t i = 0; i < NSWITCHES; i++)
            snprintf(keys + strlen(keys), sizeof keys - strlen(keys), ", %s", switches[i].file_key);
    return keys;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = '\0';
    return s;
}

static int load_file(struct vgpu_config *cfg, FILE *f, const char *path, char *err, size_t errlen)
{
    char line[1024];
    int lineno = 0, have_limit = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *s = trim(line);
        if (!*s)
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            snprintf(err, errlen, "%s line %d: \"%s\" is not key=value", path, lineno, s);
            return -1;
        }
        *eq = '\0';
        char *key = trim(s), *value = trim(eq + 1);
        char what[300];
        snprintf(what, sizeof what, "%s line %d: %s", path, lineno, key);
        if (strcmp(key, "context_reserve") == 0) {
            if (vgpu_parse_size(value, &cfg->ctx_reserve) != 0) {
                snprintf(err, errlen, "%s line %d: context_reserve=\"%s\" is not a size: expected e.g. 512MiB or 0",
                         path, lineno, value);
                return -1;
            }
            continue;
        }
        if (strcmp(key, "memory_limit") == 0) {
            char e2[400];
            if (vgpu_parse_limits(value, cfg->limit, e2, sizeof e2) != 0) {
                snprintf(err, errlen, "%s line %d: %s", path, lineno, e2);
                return -1;
            }
            have_limit = 1;
            continue;
        }
        size_t i;
        for (i = 0; i < NSWITCHES; i++)
            if (strcmp(key, switches[i].file_key) == 0)
                break;
        if (i == NSWITCHES) {
            /* a key this libvgpu does not know may be a setting it would get wrong: fail closed */
            snprintf(err, errlen, "%s line %d: unknown key \"%s\": expected memory_limit, context_reserve%s", path,
                     lineno, key, switch_keys());
            return -1;
        }
        if (parse_switch(what, value, (int *)((char *)cfg + switches[i].offset), err, errlen) != 0)
            return -1;
    }
    if (!have_limit) {
        snprintf(err, errlen, "%s has no memory_limit line", path);
        return -1;
    }
    return 0;
}

uint32_t vgpu_config_flags(const struct vgpu_config *cfg)
{
    uint32_t flags = 0;
    for (size_t i = 0; i < NSWITCHES; i++)
        flags |= (uint32_t)(*(const int *)((const char *)cfg + switches[i].offset) & 1) << switches[i].bit;
    return flags;
}

/* An environment variable the device plugin's file overrides: said once, when it differs. */
static void ignored(const char *name, const char *contract_value)
{
    const char *v = getenv(name);
    if (v && *v && strcmp(v, contract_value) != 0)
        vgpu_log(VGPU_WARN, "%s=\"%s\" ignored: the device plugin's quota file %s is present", name, v, VGPU_QUOTA_FILE);
}

/* Running by hand, without the device plugin's file: the environment is the configuration;
 * VGPU_CONFIG_FILE names a quota file whose keys win over it. */
static int load_by_hand(struct vgpu_config *cfg, char *err, size_t errlen)
{
    for (size_t i = 0; i < NSWITCHES; i++) {
        const char *v = getenv(switches[i].env);
        if (v && *v && parse_switch(switches[i].env, v, (int *)((char *)cfg + switches[i].offset), err, errlen) != 0)
            return -1;
    }
    const char *reserve = getenv("VGPU_CONTEXT_RESERVE");
    if (reserve && *reserve && vgpu_parse_size(reserve, &cfg->ctx_reserve) != 0) {
        snprintf(err, errlen, "VGPU_CONTEXT_RESERVE=\"%s\" is not a size: expected e.g. 300MiB or 0", reserve);
        return -1;
    }
    vgpu_config_region_dir(cfg->region_dir, sizeof cfg->region_dir, &cfg->region_dir_explicit);

    const char *path = getenv("VGPU_CONFIG_FILE");
    if (path && *path) {
        FILE *f = fopen(path, "re");
        if (!f) {
            snprintf(err, errlen, "cannot read quota file VGPU_CONFIG_FILE=\"%s\": %s", path, strerror(errno));
            return -1;
        }
        int rc = load_file(cfg, f, path, err, errlen);
        fclose(f);
        snprintf(cfg->source, sizeof cfg->source, "quota file %s", path);
        return rc;
    }
    const char *env = getenv("VGPU_MEMORY_LIMIT");
    if (env && *env) {
        char e2[400];
        if (vgpu_parse_limits(env, cfg->limit, e2, sizeof e2) != 0) {
            snprintf(err, errlen, "VGPU_MEMORY_LIMIT: %s", e2);
            return -1;
        }
        snprintf(cfg->source, sizeof cfg->source, "VGPU_MEMORY_LIMIT=%s", env);
    } else {
        snprintf(cfg->source, sizeof cfg->source, "no quota configured");
    }
    return 0;
}

int vgpu_config_contract(void)
{
    return access(VGPU_QUOTA_FILE, F_OK) == 0 || errno != ENOENT;
}

int vgpu_config_region_dir(char *out, size_t len, int *explicit_dir)
{
    const char *dir = getenv("VGPU_REGION_DIR");
    int contract = vgpu_config_contract();
    *explicit_dir = contract || (dir && *dir);
    snprintf(out, len, "%s", !contract && dir && *dir ? dir : VGPU_CONTRACT_REGION_DIR);
    return contract;
}

int vgpu_config_load(struct vgpu_config *cfg, char *err, size_t errlen)
{
    memset(cfg, 0, sizeof *cfg);
    for (size_t i = 0; i < NSWITCHES; i++)
        *(int *)((char *)cfg + switches[i].offset) = switches[i].def;
    vgpu_parse_size(DEFAULT_CTX_RESERVE, &cfg->ctx_reserve);

    /* The device plugin's read-only file, when present, is the whole configuration, with the
     * contract's region folder: a process of the container cannot move or override either. */
    FILE *f = fopen(VGPU_QUOTA_FILE, "re");
    if (!f && errno == ENOENT)
        return load_by_hand(cfg, err, errlen);
    if (!f) {
        snprintf(err, errlen, "cannot read the device plugin's quota file %s: %s", VGPU_QUOTA_FILE, strerror(errno));
        return -1;
    }
    int rc = load_file(cfg, f, VGPU_QUOTA_FILE, err, errlen);
    fclose(f);
    cfg->region_dir_explicit = 1;
    snprintf(cfg->region_dir, sizeof cfg->region_dir, "%s", VGPU_CONTRACT_REGION_DIR);
    snprintf(cfg->source, sizeof cfg->source, "quota file %s", VGPU_QUOTA_FILE);
    ignored("VGPU_CONFIG_FILE", VGPU_QUOTA_FILE);
    ignored("VGPU_REGION_DIR", VGPU_CONTRACT_REGION_DIR);
    return rc;
}
