"""One accepted and one failing program per fncall language (SandboxFusion's names), shared by
the executor and e2e tests and bench/fncall.py: each accepted one reads "a b" and prints a+b."""

APLUSB: dict[str, str] = {
    "python": "a, b = map(int, input().split())\nprint(a + b)\n",
    "cpp": "#include <iostream>\nint main(){long long a,b;std::cin>>a>>b;std::cout<<a+b<<std::endl;}\n",
    "c": '#include <stdio.h>\nint main(){long long a,b;scanf("%lld %lld",&a,&b);printf("%lld\\n",a+b);}\n',
    "go": 'package main\nimport "fmt"\nfunc main(){var a,b int64;fmt.Scan(&a,&b);fmt.Println(a+b)}\n',
    "java": ("import java.util.*;\npublic class Main{public static void main(String[] x){Scanner s=new Scanner(System.in);"
             "System.out.println(s.nextLong()+s.nextLong());}}\n"),
    "nodejs": ("const [a, b] = require('fs').readFileSync(0, 'utf8').trim().split(/\\s+/).map(Number);\n"
               "console.log(a + b);\n"),
    "typescript": ("const input: string = require('fs').readFileSync(0, 'utf8');\n"
                   "const [a, b]: number[] = input.trim().split(/\\s+/).map(Number);\nconsole.log(a + b);\n"),
    "rust": ("use std::io::Read;\nfn main(){let mut s=String::new();std::io::stdin().read_to_string(&mut s).unwrap();"
             "let v:Vec<i64>=s.split_whitespace().map(|x|x.parse().unwrap()).collect();println!(\"{}\",v[0]+v[1]);}\n"),
    "bash": "read a b\necho $((a + b))\n",
    "ruby": "a, b = gets.split.map(&:to_i)\nputs a + b\n",
    "php": "<?php\n[$a, $b] = array_map('intval', explode(' ', trim(fgets(STDIN))));\necho $a + $b, \"\\n\";\n",
    "lua": "local a, b = io.read('n', 'n')\nprint(math.tointeger(a + b))\n",
    "perl": "my ($a, $b) = split ' ', <STDIN>;\nprint $a + $b, \"\\n\";\n",
}
# pytest: the code is a test module; its verdict is pytest's exit status.
PYTEST_OK = "def test_add():\n    assert 1 + 1 == 2\n"
PYTEST_FAIL = "def test_add():\n    assert 1 + 1 == 3\n"

# A program that fails: compile errors for the compiled languages, a non-zero exit otherwise.
FAILING: dict[str, str] = {
    "python": "raise SystemExit(3)\n",
    "pytest": PYTEST_FAIL,
    "cpp": "int main( {\n",
    "c": "int main( {\n",
    "go": "package main\nfunc main(){ undefined() }\n",
    "java": "public class Main { void f( }\n",
    "nodejs": "process.exit(4)\n",
    "typescript": "throw new Error('boom');\n",
    "rust": "fn main() { let x: i32 = \"a\"; }\n",
    "bash": "exit 5\n",
    "ruby": "raise 'boom'\n",
    "php": "<?php exit(2);\n",
    "lua": "error('boom')\n",
    "perl": "die \"boom\\n\";\n",
}
COMPILED_FAILS = ("cpp", "c", "go", "java", "rust")  # their FAILING program fails to compile
LANGUAGES = tuple(FAILING)


def accepted(language: str) -> str:
    return PYTEST_OK if language == "pytest" else APLUSB[language]
