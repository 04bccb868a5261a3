// AMX unit probe (issue 5, CPU round 14): what tile loads, tile stores and vector work cost beside
// TDPBF16PS on one core. Build: g++ -O2 -march=native -mamx-tile -mamx-bf16 dev/amx_port_probe.cpp
// -o /tmp/amx_port_probe && taskset -c 1 /tmp/amx_port_probe   (Linux 5.16+, a CPU with AMX-BF16)
// Part 1: operand orders of a 2 x 2 block with tiles loaded from a 256 KiB rolling buffer (L2).
// Part 2: four TDPs beside N vector instructions of one kind (tiles loaded from a 4 KiB buffer).
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <cstdio>
#include <cstdint>
#include <ctime>
struct Cfg { uint8_t palette=1,start_row=0; uint8_t res[14]={}; uint16_t colsb[16]={}; uint8_t rows[16]={}; };
static double now(){timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
alignas(64) uint16_t buf[8][512*64];
#define L(tt,bb) _tile_loadd(tt,buf[bb]+o,64)
#define T(cc,aa,bb) _tile_dpbf16ps(cc,aa,bb)
static int part1(){ syscall(SYS_arch_prctl,0x1023,18); Cfg cfg; for(int i=0;i<8;i++){cfg.colsb[i]=64;cfg.rows[i]=16;} _tile_loadconfig(&cfg);
 for(int i=0;i<8;i++)for(int j=0;j<512*64;j++)buf[i][j]=0x3c00;
 _tile_zero(0);_tile_zero(1);_tile_zero(2);_tile_zero(3);
 long n=2000000; double t0,t;
#define RUN(name,tdps,body) t0=now(); for(long i=0;i<n;i++){ int o=(i&63)*512; body } t=now()-t0; printf("%-40s %.2f ns/TDP  %.0f%% of 4.39\n",name,t/n/tdps*1e9, 4.39/(t/n/tdps*1e9)*100);
 RUN("v1 L4 L5 L6 L7 T046 T147 T256 T357",4, L(4,0);L(5,1);L(6,2);L(7,3);T(0,4,6);T(1,4,7);T(2,5,6);T(3,5,7);)
 RUN("v2 L4 L6 T046 L7 T147 L5 T256 T357",4, L(4,0);L(6,2);T(0,4,6);L(7,3);T(1,4,7);L(5,1);T(2,5,6);T(3,5,7);)
 RUN("v3 1x2 double-buffered (3 loads/2 TDP)",4, L(4,0);L(6,2);L(7,3);T(0,4,6);T(1,4,7);L(5,1);L(2,4);L(3,5);T(0,5,2);T(1,5,3);)
 RUN("v5 1x3 + A double (4 loads/3 TDP)",6, L(4,0);L(5,1);L(6,2);L(7,3);T(0,3,5);T(1,3,6);T(2,3,7);L(3,4);L(5,5);L(6,6);L(7,7);T(0,4,5);T(1,4,6);T(2,4,7);)
 RUN("v6 1x3 A fixed, B 3 + 1 spare rotate",3, L(5,1);L(6,2);L(7,3);T(0,4,5);T(1,4,6);T(2,4,7);)
 RUN("v7 2x2 with acc reuse order T046 T256 T147 T357",4, L(4,0);L(6,2);T(0,4,6);L(5,1);T(2,5,6);L(7,3);T(1,4,7);T(3,5,7);)
 return 0;}
#define F8 "vfmadd231ps %%zmm16,%%zmm17,%%zmm0\n\tvfmadd231ps %%zmm16,%%zmm17,%%zmm1\n\tvfmadd231ps %%zmm16,%%zmm17,%%zmm2\n\tvfmadd231ps %%zmm16,%%zmm17,%%zmm3\n\tvfmadd231ps %%zmm16,%%zmm17,%%zmm4\n\tvfmadd231ps %%zmm16,%%zmm17,%%zmm5\n\tvfmadd231ps %%zmm16,%%zmm17,%%zmm6\n\tvfmadd231ps %%zmm16,%%zmm17,%%zmm7\n\t"
#define S8 "vscalefps %%zmm16,%%zmm17,%%zmm8\n\tvscalefps %%zmm16,%%zmm17,%%zmm9\n\tvscalefps %%zmm16,%%zmm17,%%zmm10\n\tvscalefps %%zmm16,%%zmm17,%%zmm11\n\tvscalefps %%zmm16,%%zmm17,%%zmm12\n\tvscalefps %%zmm16,%%zmm17,%%zmm13\n\tvscalefps %%zmm16,%%zmm17,%%zmm14\n\tvscalefps %%zmm16,%%zmm17,%%zmm15\n\t"
#define P8 "vpermps %%zmm16,%%zmm17,%%zmm8\n\tvpermps %%zmm16,%%zmm17,%%zmm9\n\tvpermps %%zmm16,%%zmm17,%%zmm10\n\tvpermps %%zmm16,%%zmm17,%%zmm11\n\tvpermps %%zmm16,%%zmm17,%%zmm12\n\tvpermps %%zmm16,%%zmm17,%%zmm13\n\tvpermps %%zmm16,%%zmm17,%%zmm14\n\tvpermps %%zmm16,%%zmm17,%%zmm15\n\t"
#define G8 "vfmadd231ps %%zmm16,%%zmm17,%%zmm8\n\tvfmadd231ps %%zmm16,%%zmm17,%%zmm9\n\tvfmadd231ps %%zmm16,%%zmm17,%%zmm10\n\tvfmadd231ps %%zmm16,%%zmm17,%%zmm11\n\tvfmadd231ps %%zmm16,%%zmm17,%%zmm12\n\tvfmadd231ps %%zmm16,%%zmm17,%%zmm13\n\tvfmadd231ps %%zmm16,%%zmm17,%%zmm14\n\tvfmadd231ps %%zmm16,%%zmm17,%%zmm15\n\t"
#define R8 "vreduceps $9,%%zmm16,%%zmm8\n\tvreduceps $9,%%zmm16,%%zmm9\n\tvreduceps $9,%%zmm16,%%zmm10\n\tvreduceps $9,%%zmm16,%%zmm11\n\tvreduceps $9,%%zmm16,%%zmm12\n\tvreduceps $9,%%zmm16,%%zmm13\n\tvreduceps $9,%%zmm16,%%zmm14\n\tvreduceps $9,%%zmm16,%%zmm15\n\t"
#define C8 "vcvtne2ps2bf16 %%zmm16,%%zmm17,%%zmm8\n\tvcvtne2ps2bf16 %%zmm16,%%zmm17,%%zmm9\n\tvcvtne2ps2bf16 %%zmm16,%%zmm17,%%zmm10\n\tvcvtne2ps2bf16 %%zmm16,%%zmm17,%%zmm11\n\tvcvtne2ps2bf16 %%zmm16,%%zmm17,%%zmm12\n\tvcvtne2ps2bf16 %%zmm16,%%zmm17,%%zmm13\n\tvcvtne2ps2bf16 %%zmm16,%%zmm17,%%zmm14\n\tvcvtne2ps2bf16 %%zmm16,%%zmm17,%%zmm15\n\t"
#define D8 "vrndscaleps $8,%%zmm16,%%zmm8\n\tvrndscaleps $8,%%zmm16,%%zmm9\n\tvrndscaleps $8,%%zmm16,%%zmm10\n\tvrndscaleps $8,%%zmm16,%%zmm11\n\tvrndscaleps $8,%%zmm16,%%zmm12\n\tvrndscaleps $8,%%zmm16,%%zmm13\n\tvrndscaleps $8,%%zmm16,%%zmm14\n\tvrndscaleps $8,%%zmm16,%%zmm15\n\t"
#define M8 "vmaxps %%zmm16,%%zmm17,%%zmm8\n\tvmaxps %%zmm16,%%zmm17,%%zmm9\n\tvmaxps %%zmm16,%%zmm17,%%zmm10\n\tvmaxps %%zmm16,%%zmm17,%%zmm11\n\tvmaxps %%zmm16,%%zmm17,%%zmm12\n\tvmaxps %%zmm16,%%zmm17,%%zmm13\n\tvmaxps %%zmm16,%%zmm17,%%zmm14\n\tvmaxps %%zmm16,%%zmm17,%%zmm15\n\t"
#define CLOB :::"xmm0","xmm1","xmm2","xmm3","xmm4","xmm5","xmm6","xmm7","xmm8","xmm9","xmm10","xmm11","xmm12","xmm13","xmm14","xmm15"
#define TD4 _tile_dpbf16ps(0,4,6);_tile_dpbf16ps(1,4,7);_tile_dpbf16ps(2,5,6);_tile_dpbf16ps(3,5,7);
static int part2(){
 _tile_zero(0);_tile_zero(1);_tile_zero(2);_tile_zero(3);_tile_zero(4);_tile_zero(5);_tile_zero(6);_tile_zero(7);
 long n=1000000; double t0,t;
#undef RUN
#define RUN(name,body) t0=now(); for(long i=0;i<n;i++){ body } t=now()-t0; printf("%-44s %.1f ns per iteration\n",name,t/n*1e9);
 for(int i=0;i<512*64;i++)buf[0][i]=0;
 RUN("64 vreduceps", asm volatile(R8 R8 R8 R8 R8 R8 R8 R8 CLOB);)
 RUN("64 vrndscaleps", asm volatile(D8 D8 D8 D8 D8 D8 D8 D8 CLOB);)
 RUN("64 vcvtne2ps2bf16", asm volatile(C8 C8 C8 C8 C8 C8 C8 C8 CLOB);)
 RUN("64 vmaxps", asm volatile(M8 M8 M8 M8 M8 M8 M8 M8 CLOB);)
 RUN("64 vscalefps", asm volatile(S8 S8 S8 S8 S8 S8 S8 S8 CLOB);)
 RUN("64 FMA", asm volatile(F8 G8 F8 G8 F8 G8 F8 G8 CLOB);)
 RUN("4 TDP + 64 vpermps", TD4 asm volatile(P8 P8 P8 P8 P8 P8 P8 P8 CLOB);)
 RUN("4L+4 TDP", _tile_loadd(4,buf[0],64);_tile_loadd(5,buf[0]+512,64);_tile_loadd(6,buf[0]+1024,64);_tile_loadd(7,buf[0]+1536,64); TD4)
 RUN("4L+4 TDP + 32 vpermps", _tile_loadd(4,buf[0],64);_tile_loadd(5,buf[0]+512,64);_tile_loadd(6,buf[0]+1024,64);_tile_loadd(7,buf[0]+1536,64); TD4 asm volatile(P8 P8 P8 P8 CLOB);)
 RUN("4L+4 TDP + 64 vpermps", _tile_loadd(4,buf[0],64);_tile_loadd(5,buf[0]+512,64);_tile_loadd(6,buf[0]+1024,64);_tile_loadd(7,buf[0]+1536,64); TD4 asm volatile(P8 P8 P8 P8 P8 P8 P8 P8 CLOB);)
 RUN("4L+4 TDP + 64 FMA", _tile_loadd(4,buf[0],64);_tile_loadd(5,buf[0]+512,64);_tile_loadd(6,buf[0]+1024,64);_tile_loadd(7,buf[0]+1536,64); TD4 asm volatile(F8 G8 F8 G8 F8 G8 F8 G8 CLOB);)
 RUN("4L+4 TDP + 96 FMA", _tile_loadd(4,buf[0],64);_tile_loadd(5,buf[0]+512,64);_tile_loadd(6,buf[0]+1024,64);_tile_loadd(7,buf[0]+1536,64); TD4 asm volatile(F8 G8 F8 G8 F8 G8 F8 G8 F8 G8 F8 G8 CLOB);)
 return 0;}
int main() {
  syscall(SYS_arch_prctl, 0x1023, 18);  // ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA
  Cfg cfg;
  for (int i = 0; i < 8; i++) { cfg.colsb[i] = 64; cfg.rows[i] = 16; }
  _tile_loadconfig(&cfg);
  part1();
  part2();
  _tile_release();
  return 0;
}
